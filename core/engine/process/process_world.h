// The engine as a process world (docs/distributed.md): rank 0 lives in the caller's process and
// opens a door through which `h3 worker` processes join; when the ranks lose each other, rank 0
// forms the world again at the next request (a restarted worker joins) and every rank serves on.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "admission/door.h"
#include "engine/process/job_channel.h"
#include "engine/process/rank_server.h"

namespace h3::engine_detail {

// How a rank of a process world meets its peers at rank 0's door: rank 0 and every worker build
// theirs from the same settings, which the door compares at admission.
struct DoorSettings {
  std::string rendezvous;  // rank 0's HOST:PORT
  int world_size = 0;
  std::string token_file;
  std::string device;         // "cpu" or "cuda"
  std::string compute_dtype;  // resolved
  int sp = 1;                 // the DiT's Ulysses degree
  std::chrono::milliseconds timeout{0};
  int cuda_device = 0;
};
dist::DoorOptions door_options(const ModelInfo& model, const DoorSettings& s);

// Rank 0's side: run() is the engine's world thread; form_again() is called by a request that
// found the world broken.
class ProcessWorld {
 public:
  ProcessWorld(const dist::DoorOptions& door, RankServer& server, JobChannel& channel);

  // Forms the world through the door, serves it, and forms it again when a request asks, until
  // the engine closes. Every formation's outcome goes to whoever waits for it.
  void run();

  // Caller side: rank 0 opens its door again, the workers join, every rank loads (or keeps) its
  // parts. Throws what the formation or the loading threw; the world then stays broken and the
  // next request tries again.
  void form_again(const ProgressFn& progress);

 private:
  std::unique_ptr<dist::DoorServer> door_;
  RankServer& server_;
  JobChannel& channel_;
};

}  // namespace h3::engine_detail
