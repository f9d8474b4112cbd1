// Where a causal stream's prompt changes sit on the running clock (docs/element.md,
// "h3-prompt-applied"). The engine takes a new prompt at a chunk boundary, before that chunk
// exists; the chunk's running time is known only once its first frame goes out, because a live
// source's buffers carry the running time at which the stream's first buffer was ready on top of
// the stream's own time (LiveClock's anchor). So a change is reported when that frame is pushed,
// with the running time it went out with; and the running time an `h3-prompt` event names is
// turned into the stream's own time with the origin the pushed frames show. Knows nothing of the
// element: it says what to report.
// Thread-safe: the generation's worker (applied), the streaming thread (pushed), the application
// (to_stream_time).
#pragma once

#include <gst/gst.h>

#include <cstdint>
#include <deque>
#include <mutex>

namespace h3gst {

class PromptTimes {
 public:
  // A new stream (a start, or the clip generated again after a flush): no change pending, the
  // origin unknown.
  void reset();
  // The engine took a new prompt from chunk `chunk` on, whose first frame is `first_frame`.
  void applied(int64_t chunk, int64_t first_frame);
  // Frame `frame` (stream time `stream_time`) went out at `running_time`. Returns the chunk whose
  // prompt change this frame reports (its first frame), else -1.
  int64_t pushed(int64_t frame, GstClockTime stream_time, GstClockTime running_time);
  // The stream's time at `running_time`: counted from the running time of the stream's time 0 as
  // the pushed frames show it; before any frame went out, from the stream's first frame (the
  // running time taken as the stream's time). 0 for a running time before the stream's start.
  GstClockTime to_stream_time(GstClockTime running_time) const;

 private:
  struct Change {
    int64_t chunk, first_frame;
  };
  mutable std::mutex mutex_;
  std::deque<Change> pending_;                 // in the order the engine took them (by chunk)
  GstClockTime origin_ = GST_CLOCK_TIME_NONE;  // the running time of the stream's time 0
};

}  // namespace h3gst
