// The hand-over between rank 0's thread and the thread that called Engine::open/generate.
//
// Rank 0 posts progress reports (fire and forget, except a denoising step's, which it waits
// for) and chunks/latents (post, then wait for the caller's answer: whatever the caller's code
// threw, or nothing), and finally the request's outcome. The caller pumps the events on its own thread, so
// the sink and the progress callback run there, in order; because rank 0 waits for each chunk's answer, a
// sink that blocks stalls rank 0 exactly as if rank 0 had called it, and rank 0's peers wait at the next
// collective.
//
// Each request in flight has a mailbox of its own (its caller's); the engine's opening and its
// process world's forming again report through the job channel's (engine/process/job_channel.h). A request
// that takes turns with others at the ranks (engine/scheduler/session.h) gives its rank to them while its
// caller answers: its mailbox's Waiter does the waiting, and the serving loop, woken by the
// answer listener, gives the request its turn again once answered().
#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>

#include "h3/causal_held.h"
#include "h3/progress.h"
#include "vae/chunk_sink.h"

namespace h3::engine_detail {

struct Event {
  enum class Kind { kProgress, kChunk, kLatents, kCausalHeld, kDone };
  explicit Event(Kind k) : kind(k) {}
  Kind kind;
  Progress progress{Phase::kLoading};
  Chunk chunk{};
  at::Tensor video, audio;
  CausalHeld held;           // kCausalHeld
  std::exception_ptr error;  // kDone: the outcome (null = success)
  // kDone with an error: the request never reached every rank (their world broke before it was
  // delivered), so none of it ran and a process world may send it again once formed again.
  bool undelivered = false;
  bool awaits_answer = false;  // posted by call(): the caller must answer() it
};

class Mailbox {
 public:
  // How call() waits for the caller's answer instead of blocking on this mailbox.
  class Waiter {
   public:
    virtual ~Waiter() = default;
    // Returns once answered() (or throws: the request is being ended). `chunk_frames`: what was
    // posted is a chunk of frames (a live stream's clock counts those).
    virtual void await_answer(bool chunk_frames) = 0;
  };

  // Rank 0's side.
  void post(Event e);
  // Posts and waits until the caller answered it; returns what the caller's handler threw.
  std::exception_ptr call(Event e);
  // The caller answered the last call() and its answer was not taken yet.
  bool answered() const;
  // Set before rank 0 uses the mailbox, by the request's session; null: call() blocks.
  void set_waiter(Waiter* w) { waiter_ = w; }
  // Called after every answer, outside the mailbox's lock (the serving loop's wake-up).
  void set_answer_listener(std::function<void()> f) { on_answer_ = std::move(f); }

  // Caller side.
  Event take();
  void answer(std::exception_ptr error);

 private:
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<Event> queue_;
  bool waiting_ = false, answered_ = false;
  std::exception_ptr answer_;
  Waiter* waiter_ = nullptr;
  std::function<void()> on_answer_;
};

}  // namespace h3::engine_detail
