// A process world's peers check their own host's memory (docs/engine.md, "Memory guard"): rank 0
// checked the request against its own when it planned it, but each `h3 worker` runs in its own
// process, maybe on another host with less memory. Before any work of the request, every peer
// estimates its own share and the ranks agree; a peer that cannot hold it fails the request on
// every rank with kOutOfMemory naming that rank and its host, and the world serves the next one.
#pragma once

#include <cstdint>

#include "engine/memory_guard.h"
#include "engine/stage.h"

namespace h3::engine_detail {

// Every rank of a process world, at the same point: `shape` is one rank of this world (its
// tp, dtype and device), `limit_bytes` this rank's own max-memory (0: what its host has). Rank 0
// contributes no check of its own.
void peer_memory_stage(const StageContext& c, const GenerationRequest& request, const MemoryShape& shape,
                       int64_t limit_bytes);

}  // namespace h3::engine_detail
