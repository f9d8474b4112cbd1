// The shared-memory backend of Group, for the thread ranks of one process (run_threads):
// every rank's tensors live in one address space, so a collective is a few meetings of the
// ranks and plain copies between their buffers, at memory speed, instead of Gloo's loopback
// TCP (docs/distributed.md, "Thread ranks"). Internal to core/dist.
#pragma once

#include <chrono>
#include <memory>

#include "dist/group.h"

namespace h3::dist {

// What the thread ranks of one world share: where each rank's buffers are during a
// collective, the meeting count and the first failure. Made once per world.
class MemoryWorld;
std::shared_ptr<MemoryWorld> make_memory_world(int size);

// Rank `rank` of `world`. The world also holds the failure board and run_on_owner's marks
// (the other backends keep them in their rendezvous store).
std::unique_ptr<Group> make_memory_group(std::shared_ptr<MemoryWorld> world, int rank,
                                         std::chrono::milliseconds timeout);

}  // namespace h3::dist
