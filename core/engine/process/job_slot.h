// The hand-over of requests from their callers' threads to rank 0's thread, and the engine's two
// other signals to that thread (close; form the process world again).
//
// A job travels with what only its caller holds — the cancel token, the mailbox it pumps, the
// latents to decode, the time it started — as one `DispatchedJob` that rank 0 takes *out of* the
// slot: a job runs at most once, never without its token, and a job its caller withdrew (its
// dispatch returned) can no longer be taken. Rank 0 keeps no count of the jobs it has seen, so a
// rank 0 that serves a world formed again cannot mistake an old job for a new one (the cause of a
// SIGSEGV: a re-formed rank 0 picked up the last request again after its caller had left, with a
// null token). Several callers may offer at once (the engine runs many requests): their offers
// wait in the order they came until rank 0 admits them.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/process/job.h"
#include "engine/process/mailbox.h"
#include "h3/progress.h"

namespace h3::engine_detail {

struct DispatchedJob {
  Job job;
  // The caller's token and mailbox. Valid while rank 0 runs the job: the caller's dispatch waits
  // for the job's outcome before it returns (and withdraws a job nobody took).
  const StreamControl* cancel = nullptr;
  Mailbox* mailbox = nullptr;
  at::Tensor decode_latents;  // kDecode: rank 0's input
  std::chrono::steady_clock::time_point start;
  uint64_t offer = 0;  // set by JobSlot::offer: what withdraw() names
};

class JobSlot {
 public:
  // Rank 0, before it reports its world ready: from now on offers are taken.
  void open_for_jobs();
  // Rank 0, when it stops serving (close, or its world broke): later offers are refused, and the
  // offers nobody took come back so that their callers can be answered.
  std::vector<DispatchedJob> close_for_jobs();

  // Caller: offers a job for rank 0 to take. Returns the offer's number (never 0), or 0 when no
  // rank 0 serves (its world broke after the caller last looked).
  uint64_t offer(DispatchedJob d);
  // Caller, once its dispatch is over: drops its offer if it was never taken. True if it was there.
  bool withdraw(uint64_t offer);
  // Caller: waits until rank 0 waits for work with nothing offered, or stopped serving, or the
  // engine closed: a world formed again then picks up the next offer, not anything before it.
  void wait_until_taking();

  // Rank 0 serving a world: the oldest offer, taken out of the slot; nullopt when none is offered
  // or the engine closed (close wins over a job offered at the same time).
  std::optional<DispatchedJob> take();
  // Rank 0: waits until `wake(offers waiting, closed)` holds, checked now and whenever the slot
  // changes or is rung. `wake` runs under the slot's lock.
  void wait_for_work(const std::function<bool(size_t pending, bool closed)>& wake);
  // Wakes wait_for_work to look again (a caller answered a request's hand-over).
  void ring();
  size_t pending() const;
  bool closed() const;
  // Rank 0 between worlds (a process world that broke): waits for a request to form the world
  // again (true) or for close (false).
  bool wait_for_rejoin();

  void close();           // wakes every wait for good
  void request_rejoin();  // the next request forms the process world again

 private:
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<DispatchedJob> offered_;
  uint64_t offers_ = 0;   // offers made so far: the next one's number
  bool serving_ = false;  // rank 0 takes offers
  bool taking_ = false;   // rank 0 waits for work and found nothing offered
  bool closed_ = false;
  bool rejoin_ = false;
  uint64_t rings_ = 0;
};

}  // namespace h3::engine_detail
