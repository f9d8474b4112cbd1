// A live source's timing (is-live=true; h3videosrc, and each of h3src's pads): the latency it
// reports — a chunk's frames exist only once the whole chunk is decoded —, the QoS message and
// warning for a chunk that comes after its frames were due, and the pacing of its buffers to the
// clock. Frames are sent late, never dropped.
#pragma once

#include <gst/gst.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "lifecycle.h"

namespace h3gst {

// One frame, or the slowest chunk's production time seen so far plus 5 %, whichever is more.
GstClockTime live_latency(const Published& pub);
// A live source's answer to the LATENCY `query` (holding the base class's answer, or none): live,
// its minimum raised to live_latency(pub), its maximum (when it has one) at least that.
void answer_live_latency(GstQuery* query, const Published& pub);

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
  // A new stream (a start, or a flush-stop: the clip starts again): the next buffer anchors it
  // again; not stopped; PLAYING when `playing` says so (a flush in PLAYING).
  void reset(bool playing = false);
  // PLAYING or not: the waits hold the pads' buffers while not.
  void set_playing(bool playing);
  // Adds the anchor to `buf`'s PTS (once) and waits, as pad `slot` (0 video, 1 audio), until the
  // element plays and its clock reaches that time. False: stopped (a flush or a stop); the
  // buffer is stamped (h3src pushes it when the pad runs again).
  // `ready_late` (optional) receives how long after its running time the buffer came here
  // (negative: before), before any wait: the lateness `pace=steps` steers by.
  bool stamp_and_wait(GstElement* element, int slot, GstBuffer* buf, GstClockTimeDiff* ready_late = nullptr);
  // Wakes every wait, which returns false, until reset().
  void stop();

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool playing_ = false, stopped_ = false;
  GstClockTime anchor_ = GST_CLOCK_TIME_NONE;
  GstClockID waits_[2] = {nullptr, nullptr};
};

// One stream's pacing: each buffer waits in a LiveClock (as pad `slot` of it), then a chunk's
// first frame that comes after it was due is reported (LatenessMonitor); a stream that is not
// live is not paced. The streaming thread's: reset with its stream, before each buffer goes.
class LivePacer {
 public:
  LivePacer(LiveClock& clock, int slot) : clock_(clock), slot_(slot) {}
  // A new stream; `live`: paced.
  void reset(bool live) {
    live_ = live;
    lateness_.reset();
  }
  // The stream starts again after a flush: its next chunk anchors the lateness again.
  void restart() { lateness_.reset(); }
  // Live: stamps `buf` and waits until it is due (LiveClock::stamp_and_wait); false when a flush
  // or stop cut the wait short. `chunk`: the plan when `buf` is frame `frame`, a chunk's first.
  // `ready_late` (optional): see LiveClock::stamp_and_wait; left alone when not live.
  bool pace(GstElement* element, GstBuffer* buf, const Published* chunk = nullptr, int64_t frame = 0,
            GstClockTimeDiff* ready_late = nullptr);

 private:
  LiveClock& clock_;
  const int slot_;
  bool live_ = false;
  LatenessMonitor lateness_;
};

}  // namespace h3gst
