// A process world's peers check their own host's memory (docs/engine.md, "Memory guard"): rank 0
// checked the request against its own when it planned it, but each `h3 worker` runs in its own
// process, maybe on another host with less memory. Before any work of the request, every peer
// estimates its own share and the ranks agree; a peer that cannot hold it fails the request on
// every rank with kOutOfMemory naming that rank and its host, and the world serves the next one.
// A peer serving several requests at once holds each one's share in its own budget while it runs
// (engine/scheduler/stream_budget.h), as rank 0 does: one that would not fit beside them is refused alike.
#pragma once

#include <cstdint>

#include "engine/planning/memory_guard.h"
#include "engine/scheduler/stream_budget.h"
#include "engine/stages/stage.h"

namespace h3::engine_detail {

// Every rank of a process world, at the same point: `shape` is one rank of this world (its
// tp, dtype and device), `limit_bytes` this rank's own max-memory (0: what its host has), `budget`
// this rank's hold on the requests in flight. Rank 0 contributes no check of its own (its
// Engine reserved the request's share before offering it). The reservation is the request's
// share on this peer, held until it is destroyed.
StreamBudget::Reservation peer_memory_stage(const StageContext& c, const GenerationRequest& request,
                                            const MemoryShape& shape, int64_t limit_bytes,
                                            StreamBudget& budget);

}  // namespace h3::engine_detail
