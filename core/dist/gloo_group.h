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
// empty means the machine's own hostname. Before pairing, the ranks exchange
// their addresses through `store` and each listener admits those only
// (admission/listener_filter.h). `processes`: the ranks are processes of their own, so each shows
// its signs of life on the store while the group lives, and a rank whose connection to a peer
// failed names the peer that is gone (dist/store_board.h).
std::unique_ptr<Group> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       std::chrono::milliseconds timeout, const std::string& hostname,
                                       bool processes);

}  // namespace h3::dist
