#include "frame_writer.h"

#include <cstring>

namespace h3gst {

FrameWriter::FrameWriter() {
  gst_video_info_init(&info_);
  gst_video_info_init(&src_info_);
}

bool FrameWriter::configure(const GstVideoInfo& out) {
  GstVideoInfo src;
  gst_video_info_set_format(&src, GST_VIDEO_FORMAT_RGB, GST_VIDEO_INFO_WIDTH(&out),
                            GST_VIDEO_INFO_HEIGHT(&out));
  GST_VIDEO_INFO_PLANE_STRIDE(&src, 0) = GST_VIDEO_INFO_WIDTH(&out) * 3;
  GST_VIDEO_INFO_SIZE(&src) =
      static_cast<gsize>(GST_VIDEO_INFO_WIDTH(&out)) * 3 * GST_VIDEO_INFO_HEIGHT(&out);
  GST_VIDEO_INFO_FPS_N(&src) = GST_VIDEO_INFO_FPS_N(&out);
  GST_VIDEO_INFO_FPS_D(&src) = GST_VIDEO_INFO_FPS_D(&out);
  reset();
  if (GST_VIDEO_INFO_FORMAT(&out) != GST_VIDEO_FORMAT_RGB) {
    converter_ = gst_video_converter_new(
        &src, const_cast<GstVideoInfo*>(&out),
        gst_structure_new("GstVideoConverter", GST_VIDEO_CONVERTER_OPT_DITHER_METHOD,
                          GST_TYPE_VIDEO_DITHER_METHOD, GST_VIDEO_DITHER_NONE, nullptr));
    if (!converter_) return false;
  }
  src_info_ = src;
  info_ = out;
  return true;
}

void FrameWriter::reset() {
  if (converter_) {
    gst_video_converter_free(converter_);
    converter_ = nullptr;
  }
}

bool FrameWriter::write(const Frame& f, GstBuffer* buf, GstElement* element) const {
  if (!copy(f, buf)) {
    GST_ELEMENT_ERROR(element, RESOURCE, FAILED, ("Could not write a frame into the output buffer"),
                      (nullptr));
    return false;
  }
  return true;
}

bool FrameWriter::copy(const Frame& f, GstBuffer* buf) const {
  GstVideoFrame out;
  if (!gst_video_frame_map(&out, &info_, buf, GST_MAP_WRITE)) return false;
  const gsize row = static_cast<gsize>(f.width) * 3;
  if (!converter_) {
    auto* dst = static_cast<guint8*>(GST_VIDEO_FRAME_PLANE_DATA(&out, 0));
    const gint stride = GST_VIDEO_FRAME_PLANE_STRIDE(&out, 0);
    for (int64_t y = 0; y < f.height; ++y) memcpy(dst + y * stride, f.data + y * row, row);
  } else {
    const gsize size = row * static_cast<gsize>(f.height);
    GstBuffer* in_buf = gst_buffer_new_wrapped_full(GST_MEMORY_FLAG_READONLY, const_cast<uint8_t*>(f.data),
                                                    size, 0, size, nullptr, nullptr);
    GstVideoFrame in;
    const bool mapped = gst_video_frame_map(&in, &src_info_, in_buf, GST_MAP_READ);
    if (mapped) {
      gst_video_converter_frame(converter_, &in, &out);
      gst_video_frame_unmap(&in);
    }
    gst_buffer_unref(in_buf);
    if (!mapped) {
      gst_video_frame_unmap(&out);
      return false;
    }
  }
  gst_video_frame_unmap(&out);
  return true;
}

}  // namespace h3gst
