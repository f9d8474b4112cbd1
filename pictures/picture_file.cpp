#include "pictures/picture_file.h"

#include <gst/app/gstappsink.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <algorithm>
#include <atomic>
#include <memory>

#include "common/error.h"
#include "engine/limits.h"

namespace h3::pictures {
namespace {

// The largest side let through to the decoder's output allocation (the pixel count is checked
// once the picture's size is known).
constexpr int kMaxPictureSide = 16384;

struct Unref {
  void operator()(GstElement* e) const {
    gst_element_set_state(e, GST_STATE_NULL);
    gst_object_unref(e);
  }
};
using Pipeline = std::unique_ptr<GstElement, Unref>;
struct ObjectUnref {
  void operator()(gpointer o) const { gst_object_unref(o); }
};
template <typename T>
using Ref = std::unique_ptr<T, ObjectUnref>;

// The size the decoder announced, seen at the converter's input before anything is negotiated.
struct Announced {
  std::atomic<int> width{0}, height{0};
};

GstPadProbeReturn on_caps(GstPad*, GstPadProbeInfo* info, gpointer data) {
  GstEvent* ev = GST_PAD_PROBE_INFO_EVENT(info);
  if (GST_EVENT_TYPE(ev) == GST_EVENT_CAPS) {
    GstCaps* caps = nullptr;
    gst_event_parse_caps(ev, &caps);
    const GstStructure* s = gst_caps_get_structure(caps, 0);
    int w = 0, h = 0;
    if (gst_structure_get_int(s, "width", &w) && gst_structure_get_int(s, "height", &h)) {
      auto* a = static_cast<Announced*>(data);
      a->width = w;
      a->height = h;
    }
  }
  return GST_PAD_PROBE_OK;
}

std::string to_uri(const std::string& location, const std::string& name) {
  if (gst_uri_is_valid(location.c_str())) return location;
  if (!g_file_test(location.c_str(), G_FILE_TEST_EXISTS)) {
    throw Error(ErrorKind::kNotFound, name + ": no such file");
  }
  if (g_file_test(location.c_str(), G_FILE_TEST_IS_DIR)) {
    throw Error(ErrorKind::kInvalidArgument, name + ": a folder, not a picture");
  }
  GError* err = nullptr;
  gchar* uri = gst_filename_to_uri(location.c_str(), &err);
  if (!uri) {
    const std::string why = err ? err->message : "not a file name";
    g_clear_error(&err);
    throw Error(ErrorKind::kInvalidArgument, name + ": " + why);
  }
  std::string out(uri);
  g_free(uri);
  return out;
}

[[noreturn]] void refuse_size(const std::string& name, int w, int h) {
  throw Error(ErrorKind::kInvalidArgument,
              name + " is " + std::to_string(w) + "x" + std::to_string(h) + ": each side must be " +
                  std::to_string(kMinPictureSide) + " to " + std::to_string(kMaxPictureSide) +
                  " pixels, and at most " + std::to_string(kMaxPicturePixels / 1000000) +
                  " MP in all; scale or crop it");
}

// The bus's error, if any, as a message naming the picture.
std::string bus_error(GstBus* bus, const std::string& name, const Announced& a, bool* eos) {
  while (GstMessage* m = gst_bus_pop_filtered(bus, GstMessageType(GST_MESSAGE_ERROR | GST_MESSAGE_EOS))) {
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_EOS) {
      *eos = true;
      gst_message_unref(m);
      continue;
    }
    GError* err = nullptr;
    gchar* debug = nullptr;
    gst_message_parse_error(m, &err, &debug);
    const std::string why = err ? err->message : "unknown error";
    const bool missing =
        err && err->domain == GST_RESOURCE_ERROR && err->code == GST_RESOURCE_ERROR_NOT_FOUND;
    g_clear_error(&err);
    g_free(debug);
    gst_message_unref(m);
    const int w = a.width, h = a.height;
    if (w > 0 && (w < kMinPictureSide || h < kMinPictureSide || w > kMaxPictureSide || h > kMaxPictureSide)) {
      refuse_size(name, w, h);
    }
    if (missing) throw Error(ErrorKind::kNotFound, name + ": " + why);
    return name + ": GStreamer could not decode a picture from it (" + why +
           "); give a picture in a format GStreamer has a decoder for (PNG, JPEG, WebP, ...)";
  }
  return {};
}

Picture copy_rgb(GstSample* sample, const std::string& location, const std::string& name) {
  GstVideoInfo info;
  if (!gst_video_info_from_caps(&info, gst_sample_get_caps(sample))) {
    throw Error(ErrorKind::kInvalidArgument, name + ": the decoded picture has no video format");
  }
  const int w = GST_VIDEO_INFO_WIDTH(&info), h = GST_VIDEO_INFO_HEIGHT(&info);
  if (int64_t(w) * h > kMaxPicturePixels) refuse_size(name, w, h);
  GstVideoFrame frame;
  if (!gst_video_frame_map(&frame, &info, gst_sample_get_buffer(sample), GST_MAP_READ)) {
    throw Error(ErrorKind::kInvalidArgument, name + ": the decoded picture could not be read");
  }
  Picture p;
  p.source = location;
  p.width = w;
  p.height = h;
  p.rgb.resize(static_cast<size_t>(w) * h * 3);
  const auto* src = static_cast<const uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&frame, 0));
  const int stride = GST_VIDEO_FRAME_PLANE_STRIDE(&frame, 0);
  for (int y = 0; y < h; ++y) std::copy_n(src + y * stride, w * 3, p.rgb.data() + size_t(y) * w * 3);
  gst_video_frame_unmap(&frame);
  return p;
}

}  // namespace

Picture read_picture(const std::string& location, const std::string& what, double timeout_s) {
  const std::string name = what + " '" + location + "'";
  if (location.empty()) throw Error(ErrorKind::kInvalidArgument, what + ": no file or URI given");
  GError* err = nullptr;
  if (!gst_init_check(nullptr, nullptr, &err)) {
    const std::string why = err ? err->message : "unknown error";
    g_clear_error(&err);
    throw Error(ErrorKind::kInternal, "GStreamer could not be initialised to read " + name + ": " + why);
  }
  const std::string uri = to_uri(location, name);
  // Only raw video is exposed (a video's audio is never decoded); the converter's input is
  // watched for the announced size, and the caps below refuse a picture too small or too large
  // before the converter allocates anything for it.
  const std::string desc =
      "uridecodebin name=src caps=video/x-raw expose-all-streams=false ! videoconvert name=conv ! "
      "video/x-raw,format=RGB,width=[" +
      std::to_string(kMinPictureSide) + "," + std::to_string(kMaxPictureSide) + "],height=[" +
      std::to_string(kMinPictureSide) + "," + std::to_string(kMaxPictureSide) +
      "] ! appsink name=sink sync=false max-buffers=1";
  GstElement* raw = gst_parse_launch(desc.c_str(), &err);
  if (!raw) {
    const std::string why = err ? err->message : "unknown error";
    g_clear_error(&err);
    throw Error(ErrorKind::kInternal, "could not build the pipeline that reads " + name + ": " + why +
                                          " (are GStreamer's base plugins installed?)");
  }
  g_clear_error(&err);
  // Declared before the pipeline: the converter's probe may write to it until the pipeline is
  // stopped, which its owner does on every way out.
  Announced announced;
  Pipeline pipeline(raw);
  GstElement* src = gst_bin_get_by_name(GST_BIN(raw), "src");
  g_object_set(src, "uri", uri.c_str(), nullptr);
  gst_object_unref(src);
  GstElement* conv = gst_bin_get_by_name(GST_BIN(raw), "conv");
  GstPad* conv_sink = gst_element_get_static_pad(conv, "sink");
  gst_pad_add_probe(conv_sink, GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM, on_caps, &announced, nullptr);
  gst_object_unref(conv_sink);
  gst_object_unref(conv);
  Ref<GstElement> sink_el(gst_bin_get_by_name(GST_BIN(raw), "sink"));
  GstAppSink* sink = GST_APP_SINK(sink_el.get());
  Ref<GstBus> bus(gst_element_get_bus(raw));
  std::string failure;
  GstSample* sample = nullptr;
  bool eos = false;
  if (gst_element_set_state(raw, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    failure = bus_error(bus.get(), name, announced, &eos);
    if (failure.empty()) failure = name + ": could not be opened";
  } else {
    const gint64 deadline = g_get_monotonic_time() + static_cast<gint64>(timeout_s * G_USEC_PER_SEC);
    while (!sample && failure.empty()) {
      sample = gst_app_sink_try_pull_sample(sink, 50 * GST_MSECOND);
      if (sample) break;
      failure = bus_error(bus.get(), name, announced, &eos);
      if (!failure.empty()) break;
      if (eos || gst_app_sink_is_eos(sink)) {
        failure = name + ": holds no picture (nothing GStreamer decoded from it is video)";
      } else if (g_get_monotonic_time() > deadline) {
        failure = name + ": no picture within " + std::to_string(static_cast<int>(timeout_s)) + " s";
      }
    }
  }
  if (!sample) throw Error(ErrorKind::kInvalidArgument, failure);
  try {
    Picture p = copy_rgb(sample, location, name);
    gst_sample_unref(sample);
    return p;
  } catch (...) {
    gst_sample_unref(sample);
    throw;
  }
}

}  // namespace h3::pictures
