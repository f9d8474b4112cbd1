// queue-chunks=0 on a live stream (docs/element.md, "queue-chunks=0"): when the engine may begin
// its next chunk so that the chunk is ready just as the one playing is used up, not a whole chunk
// earlier. Why it matters: the engine takes a live prompt change when it begins a chunk, and a
// chunk's decode reads the next chunk's first latents, so the chunk the engine begins while chunk
// k plays is seen after chunk k+1; every moment it begins early is a moment a change given then
// waits a chunk more. It knows nothing of GStreamer nor of the engine: Generation measures and
// holds (generation.cpp), this decides.
//
// The timeline it works with (one decoded chunk at most in the frame queue, the one being taken):
// chunk k's frames go into the queue when chunk k-1's last frame is taken (a push that waited),
// or at once when the queue was empty (the pad was waiting: the chunk is late and plays at once);
// either way chunk k plays from about then and is used up `period` later, when chunk k+1's frames
// must be there. The engine needs `lead()` for them: the slowest of its recent productions plus a
// quarter plus two frames (a chunk that takes a new prompt also encodes it; the next ones are as
// slow as the last few were, not faster).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>

namespace h3gst {

class JustInTime {
 public:
  using Clock = std::chrono::steady_clock;
  // How many productions lead() remembers.
  static constexpr size_t kRemembered = 16;

  // `frame`: one frame's duration at the stream's rate.
  explicit JustInTime(Clock::duration frame) : frame_(frame) {}

  // A chunk of `frames` frames went into the queue at `at`: it plays from about then.
  void queued(Clock::time_point at, int64_t frames);
  // The engine took `time` to make a chunk's frames, from its start (the end of a hold, or the
  // previous hand-over) to their hand-over.
  void produced(Clock::duration time);

  // The time the engine needs for a chunk (see above); zero before the first production is known.
  Clock::duration lead() const;
  // When the engine should begin the next chunk: the chunk queued last is used up then, less
  // lead(). Clock::time_point{} (long past: begin at once) until a chunk was queued and a
  // production measured.
  Clock::time_point begin_next() const;

 private:
  const Clock::duration frame_;
  std::deque<Clock::duration> productions_;  // the last kRemembered, oldest first
  Clock::time_point used_up_{};              // when the chunk queued last is used up
};

}  // namespace h3gst
