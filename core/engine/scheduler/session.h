// One request in flight on one rank (docs/engine.md, "Many streams"). The engine serves several
// requests at once, yet every rank runs a request's stages as straight-line code issuing its
// collectives in order: so each request gets a thread of its own on every rank (a session), which
// runs the rank's stages for it (RankServer::run_job) — but only while it holds the rank. The
// rank's serving loop hands the rank to a session (resume) and waits until the session gives it
// back (it yields, or ends); one session runs on a rank at a time, and rank 0 decides which
// (engine/scheduler/scheduler.h), broadcasting each turn, so that every rank runs the same sessions in the
// same order and each session's collectives pair up across ranks as a lone request's do.
//
// A session yields only inside Group::run_on_owner, which every rank reaches at the same point of
// the request's code and where rank 0 hands something to its caller (a step's report, a chunk, the
// latents): the session installs itself as the thread's dist::OwnerTurns. There,
//  - rank 0 runs the work; where the work waits for its caller's answer (Mailbox::call), the
//    session yields (kAwaitingCaller) and the loop gives the rank to other sessions until the
//    caller answered; once the work is done it yields kOwnerDone, and its next turn (marked
//    owner_turn_done) lets it go on;
//  - every other rank yields kOwnerWait and goes on only at a turn marked owner_turn_done: the
//    peers learn that rank 0 finished from rank 0's broadcast, never from their own timing.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "dist/owner_turns.h"
#include "engine/process/mailbox.h"
#include "engine/stages/stage.h"

namespace h3::engine_detail {

class Session final : public dist::OwnerTurns, public Mailbox::Waiter {
 public:
  // Where the session gave the rank back.
  enum class Parked {
    kNotStarted,      // admitted, not run yet
    kOwnerWait,       // a peer, waiting for rank 0's owner turn to end
    kAwaitingCaller,  // rank 0, waiting for its caller's answer
    kOwnerDone,       // rank 0, its owner turn done: the peers are to be released
    kEnded,           // its request ended (outcome())
  };
  struct Resume {
    bool owner_turn_done = false;
    // The rank's group broke: every wait of the session throws this from now on, so that its
    // request unwinds (Error(kDistributed, abort_reason)).
    bool abort = false;
    std::string abort_reason;
  };

  // Starts the thread, which runs `body` from the first resume(), with `cpu_threads` intra-op
  // threads (the rank's: at::set_num_threads is per thread).
  Session(uint64_t id, std::function<void()> body, int cpu_threads);
  ~Session();  // joins the thread: the session must have ended (resume() returned kEnded)
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // The rank's serving loop: hands the rank to the session and waits until it gives it back.
  Parked resume(const Resume& r);
  uint64_t id() const { return id_; }
  Parked parked() const { return parked_; }
  std::exception_ptr outcome() const { return outcome_; }  // kEnded: what the request threw, or null

  // dist::OwnerTurns, on the session's thread.
  void run(dist::Group& g, int owner, const std::function<void()>& work, const char* what) override;
  // Mailbox::Waiter, on rank 0's session thread: gives the rank back until the caller answered.
  void await_answer(bool chunk_frames) override;

  // Rank 0: chunks of frames handed over, and when the first was (a live stream's clock).
  int64_t chunks_handed_over() const { return chunks_; }
  Clock::time_point first_hand_over() const { return first_hand_over_; }

 private:
  void main(std::function<void()> body, int cpu_threads);
  // The session's thread: gives the rank back as `why` and waits for its next turn.
  Resume yield(Parked why);

  const uint64_t id_;
  std::mutex m_;
  std::condition_variable cv_;
  bool session_holds_ = false;  // whose the rank is: the session's thread or the serving loop's
  Parked parked_ = Parked::kNotStarted;
  Resume resume_;
  bool aborted_ = false;
  std::string abort_reason_;
  std::exception_ptr outcome_;
  int64_t chunks_ = 0;
  Clock::time_point first_hand_over_{};
  std::thread thread_;  // last: it runs main() on the members above
};

}  // namespace h3::engine_detail
