// The engine's channel between the thread that calls Engine::open/generate/decode and rank 0's
// thread: the job slot going one way (engine/job_slot.h), the mailbox coming back
// (engine/mailbox.h), and the caller's pump that runs the sink and the callbacks on its own
// thread until the outcome arrives.
#pragma once

#include <atomic>
#include <exception>

#include "engine/engine.h"
#include "engine/job_slot.h"
#include "engine/mailbox.h"

namespace h3::engine_detail {

class JobChannel {
 public:
  // ---- caller side ----

  // Offers the job to rank 0 and pumps its events; `offered` is false (and nothing ran) when no
  // rank 0 serves. No job outlives this call: an offer nobody took is withdrawn before it returns.
  struct Outcome {
    bool offered = false;
    std::exception_ptr error;  // null: the job succeeded
  };
  Outcome dispatch(DispatchedJob job, const ProgressFn& progress, ChunkSink& sink,
                   const GenerateExtras* extras);
  // Runs handlers until an outcome arrives (of a job, of opening or forming the world again).
  std::exception_ptr pump(const ProgressFn& progress, ChunkSink* sink, const GenerateExtras* extras);

  // ---- rank 0's side ----

  void post_progress(const Progress& p);
  void post_done(std::exception_ptr err);
  // The outcome of forming a world and loading its ranks goes to whoever waits for it (the
  // opener, or the request that asked for the world to form again) exactly once: true if this
  // call posted it. rearm_ready_report() before each formation asked for.
  bool report_ready(std::exception_ptr err);
  void rearm_ready_report() { ready_reported_ = false; }

  Mailbox& mailbox() { return mailbox_; }
  JobSlot& slot() { return slot_; }

 private:
  Mailbox mailbox_;
  JobSlot slot_;
  std::atomic<bool> ready_reported_{false};
};

}  // namespace h3::engine_detail
