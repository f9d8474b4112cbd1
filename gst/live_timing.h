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

// A live h3src's pacing (is-live=true): its buffers carry running times (the stream's time plus
// the running time at which the first buffer of either pad was ready), and each pad pushes only
// in PLAYING, once the clock reaches its buffer's time, so that neither runs ahead of real time.
// Thread-safe: the two pads' tasks wait; the state changes and flushes wake them.
class LiveClock {
 public:
  // A new stream: the next buffer anchors it again; not stopped, not playing.
  void reset();
  // PLAYING or not: the waits hold the pads' buffers while not.
  void set_playing(bool playing);
  // Adds the anchor to `buf`'s PTS (once) and waits, as pad `slot` (0 video, 1 audio), until the
  // element plays and its clock reaches that time. False: stopped (a flush or a stop); the
  // buffer is stamped and should be pushed when the pad runs again.
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
