// A live source's timing (h3videosrc is-live=true): the latency it reports — a chunk's frames
// exist only once the whole chunk is decoded — and the QoS message and warning for a chunk that
// comes after its frames were due. Frames are sent late, never dropped.
#pragma once

#include <gst/gst.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "lifecycle.h"

namespace h3gst {

// One frame, or the slowest chunk's production time seen so far plus 5 %, whichever is more.
GstClockTime live_latency(const Published& pub);

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

// A live source's pacing (is-live=true; h3src's two pads, h3videosrc's fill()): its buffers carry
// running times (the stream's time plus the running time at which its first buffer was ready), and
// each is pushed only in PLAYING, once the clock reaches its time, so that none runs ahead of real
// time. The running time stands still while PAUSED (the pipeline moves the base time on), so after
// a pause the stream goes on where it was: the anchor is kept, the buffer that was waiting is held,
// not dropped. (GstBaseSrc's own sync for a live source takes its offset again at each PLAYING and
// drops the buffer it was waiting with, which would leave a gap or a short step in the PTS.)
// Thread-safe: the streaming threads wait; the state changes and flushes wake them.
class LiveClock {
 public:
  // A new stream: the next buffer anchors it again; not stopped, not playing.
  void reset();
  // PLAYING or not: the waits hold the pads' buffers while not.
  void set_playing(bool playing);
  // Adds the anchor to `buf`'s PTS (once) and waits, as pad `slot` (0 video, 1 audio), until the
  // element plays and its clock reaches that time. False: stopped (a flush or a stop); the
  // buffer is stamped (h3src pushes it when the pad runs again).
  bool stamp_and_wait(GstElement* element, int slot, GstBuffer* buf);
  // Wakes every wait, which returns false, until reset().
  void stop();

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool playing_ = false, stopped_ = false;
  GstClockTime anchor_ = GST_CLOCK_TIME_NONE;
  GstClockID waits_[2] = {nullptr, nullptr};
};

}  // namespace h3gst
