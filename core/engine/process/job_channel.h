// The engine's channel between the threads that call Engine::open/generate/decode and rank 0's
// thread: the job slot going one way (engine/process/job_slot.h), each request's mailbox coming back
// (engine/process/mailbox.h), and the caller's pump that runs the sink and the callbacks on its own
// thread until the outcome arrives. The channel's own mailbox carries what is nobody's request:
// loading progress and the outcome of forming the world.
#pragma once

#include <atomic>
#include <exception>

#include "engine/engine.h"
#include "engine/process/job_slot.h"
#include "engine/process/mailbox.h"

namespace h3::engine_detail {

class JobChannel {
 public:
  // ---- caller side ----

  // Offers the job to rank 0 and pumps its events from a mailbox of its own; `offered` is false
  // (and nothing ran) when no rank 0 serves. No job outlives this call: an offer nobody took is
  // withdrawn before it returns.
  struct Outcome {
    bool offered = false;
    std::exception_ptr error;  // null: the job succeeded
    bool undelivered = false;  // the error came before the job reached every rank: none of it ran
  };
  Outcome dispatch(DispatchedJob job, const ProgressFn& progress, ChunkSink& sink,
                   const GenerateExtras* extras);
  // Runs handlers until an outcome arrives (of a job, of opening or forming the world again).
  std::exception_ptr pump(const ProgressFn& progress, ChunkSink* sink, const GenerateExtras* extras) {
    return pump(mailbox_, progress, sink, extras).error;
  }

  // ---- rank 0's side ----

  void post_progress(const Progress& p);  // loading progress, to whoever opens or forms the world
  // A request's outcome, to its caller.
  static void post_done(Mailbox& to, std::exception_ptr err, bool undelivered = false);
  // The outcome of forming a world and loading its ranks goes to whoever waits for it (the
  // opener, or the request that asked for the world to form again) exactly once: true if this
  // call posted it. rearm_ready_report() before each formation asked for.
  bool report_ready(std::exception_ptr err);
  void rearm_ready_report() { ready_reported_ = false; }

  JobSlot& slot() { return slot_; }

 private:
  struct Pumped {
    std::exception_ptr error;
    bool undelivered = false;
  };
  static Pumped pump(Mailbox& from, const ProgressFn& progress, ChunkSink* sink,
                     const GenerateExtras* extras);

  Mailbox mailbox_;
  JobSlot slot_;
  std::atomic<bool> ready_reported_{false};
};

}  // namespace h3::engine_detail
