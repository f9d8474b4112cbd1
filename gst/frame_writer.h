// Writes the engine's packed RGB frames into buffers of the negotiated format: a row copy
// for RGB, GstVideoConverter (no dithering) for the other formats. Streaming thread only
// (set_caps and fill), and reset in stop().
#pragma once

#include <gst/video/video.h>

#include "frame_queue.h"

namespace h3gst {

class FrameWriter {
 public:
  FrameWriter();
  ~FrameWriter() { reset(); }
  FrameWriter(const FrameWriter&) = delete;
  FrameWriter& operator=(const FrameWriter&) = delete;

  // Prepares for frames of `out` (size, rate and format); false when RGB cannot be converted
  // to its format.
  bool configure(const GstVideoInfo& out);
  // Frees the converter.
  void reset();
  // The negotiated format; GST_VIDEO_FORMAT_UNKNOWN before configure().
  const GstVideoInfo& info() const { return info_; }
  // Writes `f` into `buf`; false, with an error posted on `element`, when `buf` (or the frame)
  // could not be mapped.
  bool write(const Frame& f, GstBuffer* buf, GstElement* element) const;

 private:
  bool copy(const Frame& f, GstBuffer* buf) const;  // false: a map failed

  GstVideoInfo info_;      // the negotiated format
  GstVideoInfo src_info_;  // the engine's packed RGB, width*3 bytes a row
  GstVideoConverter* converter_ = nullptr;
};

}  // namespace h3gst
