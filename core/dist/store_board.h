// Cross-rank bookkeeping in the rendezvous store, shared by the backends:
// the failure board (the first failure a rank reports, read by its peers
// while they wait) and the departure count (ranks leave a group together).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dist/group.h"

namespace h3::dist {

// Keeps only the first failure posted in the store: later ones are echoes.
void store_post_failure(c10d::Store& store, const PeerFailure& f);
std::optional<PeerFailure> store_read_failure(c10d::Store& store);
// Counts this rank out of the group and waits (at most `bound`) until every
// rank has: no rank closes its connections while a peer still uses them.
void store_depart(c10d::Store& store, int size, std::chrono::milliseconds bound);

}  // namespace h3::dist
