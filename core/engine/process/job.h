// A request as rank 0 hands it to every rank: what to run, on which plan. It travels as
// JSON with named fields (broadcast_string), as it would between processes.
#pragma once

#include <cstdint>
#include <string>

#include "h3/request.h"

namespace h3::engine_detail {

struct Job {
  enum class Kind { kGenerate, kDecode } kind = Kind::kGenerate;
  GenerationRequest request;  // kGenerate: prompt or embeddings, seed (size and steps: the plan's)
  ClipPlan plan{};
  bool want_latents = false;  // kGenerate: hand the final latents to the caller's observer
  // kGenerate: rank 0's EngineOptions::free_text_encoder, so that every rank (a worker process
  // too, whose own options do not say) drops its encoder shard after this prompt.
  bool free_text_encoder = false;
  // kGenerate: rank 0's EngineOptions::adaln_tables, for the same reason.
  bool adaln_tables = true;
};

std::string encode(const Job& job);
// Throws h3::Error(kInternal) for a message encode() did not write.
Job decode_job(const std::string& wire);

// What rank 0 broadcasts before every turn of its ranks (engine/scheduler/scheduler.h,
// engine/scheduler/session.h).
struct TurnMessage {
  enum class Kind {
    kStop,    // rank 0 is closing: every rank leaves its serving loop (a worker process exits)
    kAdmit,   // `job` starts as session `session`, which takes this turn
    kResume,  // session `session` takes this turn
  };
  Kind kind = Kind::kStop;
  uint64_t session = 0;
  bool owner_turn_done = false;  // kResume: rank 0 finished the session's owner turn
  Job job;                       // kAdmit
};

std::string encode(const TurnMessage& turn);
// Throws h3::Error(kInternal) for a message encode() did not write.
TurnMessage decode_turn(const std::string& wire);

}  // namespace h3::engine_detail
