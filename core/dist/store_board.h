// Cross-rank bookkeeping in the rendezvous store, shared by the backends:
// the failure board (the first failure a rank reports, read by its peers
// while they wait), the departure count (ranks leave a group together) and
// the owner-wait marks (peers wait for a rank that runs the caller's code).
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

// The owner-wait marks (Group::run_on_owner): a sign of life of the owner, and
// that its `seq`-th piece of work is done.
void store_owner_alive(c10d::Store& store);
int64_t store_owner_alive_count(c10d::Store& store);
void store_owner_done(c10d::Store& store, int64_t seq);
// Waits at most `slice` for the owner's `seq`-th piece of work; true once it is done.
bool store_owner_wait_done(c10d::Store& store, int64_t seq, std::chrono::milliseconds slice);

}  // namespace h3::dist
