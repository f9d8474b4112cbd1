#include "engine/scheduler/session.h"

#include <ATen/Parallel.h>

#include <utility>

#include "dist/group.h"
#include "h3/error.h"

namespace h3::engine_detail {

Session::Session(uint64_t id, std::function<void()> body, int cpu_threads)
    : id_(id), thread_(&Session::main, this, std::move(body), cpu_threads) {}

Session::~Session() {
  if (thread_.joinable()) thread_.join();
}

void Session::main(std::function<void()> body, int cpu_threads) {
  {
    std::unique_lock<std::mutex> lk(m_);
    cv_.wait(lk, [&] { return session_holds_; });
    if (resume_.abort) aborted_ = true;  // ended before its first turn: its request never ran
  }
  std::exception_ptr err;
  try {
    if (aborted_) throw Error(ErrorKind::kDistributed, resume_.abort_reason);
    // The rank's intra-op threads, which a new thread does not inherit (at::set_num_threads is
    // per thread with OpenMP): the same count gives the same sums as a request alone.
    if (at::get_num_threads() != cpu_threads) at::set_num_threads(cpu_threads);
    const dist::OwnerTurnsScope turns(this);
    body();
  } catch (...) {
    err = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lk(m_);
    outcome_ = err;
    parked_ = Parked::kEnded;
    session_holds_ = false;
  }
  cv_.notify_all();
}

Session::Parked Session::resume(const Resume& r) {
  std::unique_lock<std::mutex> lk(m_);
  if (parked_ == Parked::kEnded) {
    throw Error(ErrorKind::kInternal, "session " + std::to_string(id_) + " was given a turn after it ended");
  }
  resume_ = r;
  session_holds_ = true;
  cv_.notify_all();
  cv_.wait(lk, [&] { return !session_holds_; });
  return parked_;
}

Session::Resume Session::yield(Parked why) {
  std::unique_lock<std::mutex> lk(m_);
  // Once aborted, the session keeps the rank and unwinds: every later wait throws at once.
  if (!aborted_) {
    parked_ = why;
    session_holds_ = false;
    cv_.notify_all();
    cv_.wait(lk, [&] { return session_holds_; });
    if (resume_.abort) {
      aborted_ = true;
      abort_reason_ = resume_.abort_reason;
    }
  }
  if (aborted_) throw Error(ErrorKind::kDistributed, abort_reason_);
  return resume_;
}

void Session::run(dist::Group& g, int owner, const std::function<void()>& work, const char* what) {
  if (owner != 0) {
    throw Error(ErrorKind::kInternal, std::string(what) +
                                          ": a request's owner turns are rank 0's, not rank " +
                                          std::to_string(owner) + "'s");
  }
  if (g.rank() != 0) {
    // Rank 0 works; the turns in between are other sessions'.
    while (!yield(Parked::kOwnerWait).owner_turn_done) {
    }
    return;
  }
  std::exception_ptr err;
  try {
    work();
  } catch (...) {
    err = std::current_exception();
  }
  // The peers go on only at the turn rank 0 marks owner_turn_done, which the scheduler gives
  // this session next (engine/scheduler/scheduler.h): what work threw comes after they were released.
  if (!yield(Parked::kOwnerDone).owner_turn_done) {
    throw Error(ErrorKind::kInternal, std::string(what) + ": session " + std::to_string(id_) +
                                          " went on after its owner turn without releasing its peers");
  }
  if (err) std::rethrow_exception(err);
}

void Session::await_answer(bool chunk_frames) {
  if (chunk_frames) {
    if (chunks_ == 0) first_hand_over_ = Clock::now();
    ++chunks_;
  }
  if (yield(Parked::kAwaitingCaller).owner_turn_done) {
    throw Error(ErrorKind::kInternal, "session " + std::to_string(id_) +
                                          " was released from its owner turn while it waited for its caller");
  }
}

}  // namespace h3::engine_detail
