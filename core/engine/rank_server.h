// One rank's side of the engine, the same for thread ranks, rank 0 of a process world and an
// `h3 worker`: load its parts, then serve rank 0's jobs (conditioning, denoise, decode) until
// rank 0 says stop or the ranks lose each other. Rank 0 hands its reports to the caller through
// the job channel; every decision is agreed across ranks (docs/engine.md).
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <mutex>
#include <string>

#include "dist/group.h"
#include "engine/job_channel.h"
#include "engine/model.h"
#include "engine/rank_threads.h"
#include "engine/stage.h"

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

  // Rank 0 of a process world: the last job failed because a rank was lost before the job
  // reached every rank (a worker that died while the world idled), so none of it ran.
  std::atomic<bool> lost_before_delivery{false};

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
  void load_parts(dist::Group& g, RankParts& parts, Clock::time_point t0);
  void choose_process_threads(dist::Group& g);
  bool serve(dist::Group& g, RankParts& parts);
  void run_job(dist::Group& g, RankParts& parts, const Job& j, const DispatchedJob* mine);

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
  CancelToken no_cancel_;  // ranks other than 0: their caller never cancels
  double load_s_ = 0;
  ResidentWeights resident_;
};

}  // namespace h3::engine_detail
