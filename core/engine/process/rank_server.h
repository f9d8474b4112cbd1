// One rank's side of the engine, the same for thread ranks, rank 0 of a process world and an
// `h3 worker`: load its parts, then serve rank 0's jobs (conditioning, denoise, decode) until
// rank 0 says stop or the ranks lose each other. Several jobs are in flight at once, each a
// session taking turns at the rank (engine/scheduler/session.h) in the order rank 0 decides
// (engine/scheduler/scheduler.h) and broadcasts. Rank 0 hands each job's reports to its caller's mailbox;
// every decision is agreed across ranks (docs/engine.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "dist/group.h"
#include "engine/model/model.h"
#include "engine/process/job.h"
#include "engine/process/job_channel.h"
#include "engine/process/rank_threads.h"
#include "engine/scheduler/session.h"
#include "engine/scheduler/stream_budget.h"
#include "engine/stages/stage.h"

namespace h3::engine_detail {

// An exception's message, for the reasons the world keeps and reports.
std::string message_of(const std::exception_ptr& e);

// What the caller's side learns of the world's health from the rank side.
class WorldHealth {
 public:
  // The ranks' groups failed: the world cannot serve any more. The first reason is kept.
  void mark_broken(const std::string& why);
  std::string broken_reason() const;  // empty: the world serves
  void clear_broken();                // a world formed again (or forming)

 private:
  mutable std::mutex m_;
  std::string broken_;
};

struct RankSetup {
  std::string device = "cpu";          // "cpu" or "cuda"
  std::string compute_dtype = "fp32";  // resolved for the device: "fp32" or "bf16"
  int sp = 1;                          // the DiT's Ulysses degree (tp = world / sp)
  // The ranks are threads of this process and share its cores; a process world's rank instead
  // keeps its parts when its world breaks and forms again.
  bool thread_ranks = true;
  int cuda_index = -1;  // device=cuda: this rank's GPU; -1: cuda:<rank> (thread ranks)
  // A process world's peer: the most a request may take in this process beside its weights
  // (`h3 worker --max-memory`); 0: what its host has available. Rank 0's is the engine's.
  int64_t max_memory = 0;
  // A process world's rank: its intra-op threads (`h3 worker --threads`); 0: its usable cores
  // shared among the world's ranks on them, chosen each time its world forms (rank_threads.h).
  int cpu_threads = 0;
  // A process world's rank: told the threads it runs, each time its world forms.
  std::function<void(int threads, const UsableCores& cores, int sharing)> announce_threads;
};

class RankServer {
 public:
  // `channel`: rank 0's hand-over to its caller (unused on the other ranks).
  RankServer(const ModelInfo& model, RankSetup setup, JobChannel& channel);

  // How a rank's time in one group ended.
  enum class Ended { kStopped, kBroken, kLoadFailed };
  // Loads (or, a process world's survivor, reuses) this rank's parts, agrees the outcome, then
  // serves. `own_load_error`: what this rank's own loading threw, if it failed.
  Ended run(dist::Group& g, std::exception_ptr* own_load_error = nullptr);

  WorldHealth& health() { return health_; }
  double load_seconds() const { return load_s_; }                        // read after the ready report
  const ResidentWeights& resident_weights() const { return resident_; }  // rank 0's; likewise
  // A process world's rank: the intra-op threads it runs in its current world; 0 before one formed.
  int cpu_threads() const { return threads_.load(); }

 private:
  // A session of this rank, and what rank 0 knows of it for the scheduler.
  struct InFlight {
    // Declared first, destroyed last: its thread may use the job and the caller's hand-over.
    std::unique_ptr<Job> job;
    std::optional<DispatchedJob> mine;  // rank 0: what its caller handed over with the job
    std::unique_ptr<Session> session;   // joins its thread when destroyed (after it ended)
    bool live = false;                  // rank 0: a causal stream (engine/scheduler/scheduler.h)
    uint64_t admitted = 0, last_turn = 0;
    double admitted_s = 0;  // rank 0: on the live streams' clock
  };
  using Sessions = std::map<uint64_t, InFlight>;

  void load_parts(dist::Group& g, RankParts& parts, Clock::time_point t0);
  void choose_process_threads(dist::Group& g);
  bool serve(dist::Group& g, RankParts& parts);
  // Rank 0: the next turn (engine/scheduler/scheduler.h), waiting for an answer, an offer or close while
  // nothing can run; an admission takes its job out of the slot into `admitted`.
  TurnMessage next_turn_on_root(Sessions& sessions, std::optional<DispatchedJob>& admitted);
  // Gives the session its turn; when it ends there, it leaves `sessions` (rank 0: its caller
  // learns the outcome).
  void take_turn(dist::Group& g, Sessions& sessions, Sessions::iterator it, const Session::Resume& r);
  // The group broke: every session still in flight ends with `reason` (rank 0: to its caller).
  void end_all(Sessions& sessions, const std::string& reason, bool root);
  void run_job(dist::Group& g, RankParts& parts, RankSessions& shared, uint64_t session, const Job& j,
               const DispatchedJob* mine);

  const ModelInfo& model_;
  const RankSetup setup_;
  JobChannel& channel_;
  WorldHealth health_;
  std::atomic<int> threads_{0};
  // A process world's rank keeps what it loaded when its world breaks and forms again: its rank
  // and the world's size stay, so its shards still fit, and reloading costs minutes on every
  // rank for the release. Thread ranks end with their world and never reuse parts. Loaded once
  // its DiT is there: a failed load clears it.
  RankParts kept_;
  // A process world's peer: the memory of the requests in flight on it (rank 0's is the Engine's).
  StreamBudget budget_;
  StreamControl no_cancel_;                 // ranks other than 0: their caller never cancels
  Mailbox no_caller_;                       // ranks other than 0: they hand nothing over
  uint64_t sessions_admitted_ = 0;          // rank 0: the last session's number
  uint64_t turns_ = 0;                      // rank 0: turns given so far (the round robin's clock)
  Clock::time_point epoch_ = Clock::now();  // rank 0: the live streams' clock starts here
  double load_s_ = 0;
  ResidentWeights resident_;
};

}  // namespace h3::engine_detail
