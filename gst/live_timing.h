// A live source's timing (h3videosrc is-live=true): the latency it reports — a chunk's frames
// exist only once the whole chunk is decoded — and the QoS message and warning for a chunk that
// comes after its frames were due. Frames are sent late, never dropped.
#pragma once

#include <gst/gst.h>

#include <cstdint>

#include "lifecycle.h"

namespace h3gst {

// One frame, or the slowest chunk's decode time seen so far plus 5 %, whichever is more.
GstClockTime live_latency(const Published& pub);

// GstBaseSrc::get_times: a live source's buffers are due at [PTS, PTS + DURATION) on the clock;
// a non-live one's are not synchronised (both NONE).
void live_buffer_times(bool live, GstBuffer* buffer, GstClockTime* start, GstClockTime* end);

// The streaming thread's: reset with its stream, told of each chunk's first frame.
class LatenessMonitor {
 public:
  void reset() { *this = LatenessMonitor(); }
  // Frame `n` (a chunk's first) is about to be pushed with `pts` and `duration`: the first call
  // anchors the stream to the running time; later ones post a QoS message when the frame is past
  // due (and a warning, once per stream).
  void chunk_start(GstElement* element, const Published& pub, int64_t n, GstClockTime pts,
                   GstClockTime duration);

 private:
  GstClockTime first_running_ = GST_CLOCK_TIME_NONE;  // the running time of frame 0
  bool warned_ = false;
};

}  // namespace h3gst
