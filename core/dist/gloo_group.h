// The Gloo backend of Group (CPU tensors), through c10d::ProcessGroupGloo.
// Internal to core/dist: callers get a Group from run_threads or join_tcp.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dist/group.h"

namespace h3::dist {

// Connects rank `rank` of `size` through `store` (every rank must call it;
// it returns once all are connected or throws h3::Error(kDistributed) after
// `timeout`). `hostname` is the address this rank's Gloo device binds to;
// empty means the machine's own hostname.
std::unique_ptr<Group> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       std::chrono::milliseconds timeout, const std::string& hostname);

// The failure board both backends keep in the rendezvous store.
void store_post_failure(c10d::Store& store, int rank, const std::string& message);
std::optional<PeerFailure> store_read_failure(c10d::Store& store);
// Counts this rank out of the group and waits (at most `bound`) until every
// rank has: no rank closes its connections while a peer still uses them.
void store_depart(c10d::Store& store, int size, std::chrono::milliseconds bound);

}  // namespace h3::dist
