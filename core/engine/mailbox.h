// The hand-over between rank 0's thread and the thread that called Engine::open/generate.
//
// Rank 0 posts progress reports (fire and forget, except a denoising step's, which it waits
// for) and chunks/latents (post, then wait for the caller's answer: whatever the caller's code
// threw, or nothing), and finally the request's outcome. The caller pumps the events on its own thread, so
// the sink and the progress callback run there, in order; because rank 0 waits for each chunk's answer, a
// sink that blocks stalls rank 0 exactly as if rank 0 had called it, and rank 0's peers wait at the next
// collective.
#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>

#include "engine/causal_held.h"
#include "engine/progress.h"
#include "vae/chunk_sink.h"

namespace h3::engine_detail {

struct Event {
  enum class Kind { kProgress, kChunk, kLatents, kCausalHeld, kDone };
  explicit Event(Kind k) : kind(k) {}
  Kind kind;
  Progress progress{Phase::kLoading};
  Chunk chunk{};
  at::Tensor video, audio;
  CausalHeld held;             // kCausalHeld
  std::exception_ptr error;    // kDone: the outcome (null = success)
  bool awaits_answer = false;  // posted by call(): the caller must answer() it
};

class Mailbox {
 public:
  void post(Event e);
  // Posts and waits until the caller answered it; returns what the caller's handler threw.
  std::exception_ptr call(Event e);
  // Caller side.
  Event take();
  void answer(std::exception_ptr error);

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Event> queue_;
  bool waiting_ = false, answered_ = false;
  std::exception_ptr answer_;
};

}  // namespace h3::engine_detail
