// The hand-over of one request from the caller's thread to rank 0's thread, and the engine's two
// other signals to that thread (close; form the process world again).
//
// A job travels with what only its caller holds — the cancel token, the latents to decode, the
// time it started — as one `DispatchedJob` that rank 0 takes *out of* the slot: a job runs at most
// once, never without its token, and a job its caller withdrew (its dispatch returned) can no
// longer be taken. Rank 0 keeps no count of the jobs it has seen, so a rank 0 that serves a
// world formed again cannot mistake an old job for a new one (the cause of a SIGSEGV: a re-formed
// rank 0 picked up the last request again after its caller had left, with a null token).
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "engine/job.h"
#include "engine/progress.h"

namespace h3::engine_detail {

struct DispatchedJob {
  Job job;
  // The caller's token. Valid while rank 0 runs the job: the caller's dispatch waits for the
  // job's outcome before it returns (and withdraws a job nobody took).
  const CancelToken* cancel = nullptr;
  at::Tensor decode_latents;  // kDecode: rank 0's input
  std::chrono::steady_clock::time_point start;
};

class JobSlot {
 public:
  // Rank 0, before it reports its world ready: from now on offers are taken.
  void open_for_jobs();
  // Rank 0, when it stops serving (close, or its world broke): later offers are refused, and an
  // offer nobody took comes back so that its caller can be answered.
  std::optional<DispatchedJob> close_for_jobs();

  // Caller: offers a job for rank 0 to take (one at a time: Engine serialises its callers).
  // False when no rank 0 serves (its world broke after the caller last looked).
  bool offer(DispatchedJob d);
  // Caller, once its dispatch is over: drops an offer that was never taken. True if there was one.
  bool withdraw();
  // Caller: waits until rank 0 waits in take() with nothing offered, or stopped serving, or the
  // engine closed: a world formed again then picks up the next offer, not anything before it.
  void wait_until_taking();

  // Rank 0 serving a world: waits until a job is offered (and takes it) or the engine closes
  // (nullopt). Close wins over a job offered at the same time.
  std::optional<DispatchedJob> take();
  // Rank 0 between worlds (a process world that broke): waits for a request to form the world
  // again (true) or for close (false).
  bool wait_for_rejoin();

  void close();           // wakes every wait for good
  void request_rejoin();  // the next request forms the process world again

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::optional<DispatchedJob> offered_;
  bool serving_ = false;  // rank 0 takes offers
  bool taking_ = false;   // rank 0 waits in take() and found nothing to take
  bool closed_ = false;
  bool rejoin_ = false;
};

}  // namespace h3::engine_detail
