// Cross-rank bookkeeping in the rendezvous store, shared by the backends:
// the failure board (each rank's first failure, read by its peers while they
// wait), the departures (ranks leave a group together) and the owner-wait
// marks (peers wait for a rank that runs the caller's code). Every record is
// one rank's own key, written with set (never a shared counter): in a process
// world's sealed store each is authenticated, and a bad value is refused, not
// a reason for the store to drop the connection (admission/sealed_store.h).
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <utility>

#include "dist/group.h"

namespace h3::dist {

// A rank's failure, once (a later one of the same rank is an echo).
void store_post_failure(c10d::Store& store, const PeerFailure& f);
// The cause among the failures of ranks 0..size-1: the one that completed the
// fewest collectives (later ones are the others' echoes), the lowest rank on a tie.
// A record that cannot be read (malformed, or failing the sealed store's
// authentication) is its rank's failure, completed 0, whose message says what
// is wrong with it: "its failure record on the store board is malformed (...)".
std::optional<PeerFailure> store_read_failure(c10d::Store& store, int size);
// Marks this rank out of the group and waits (at most `bound`) until every
// rank has: no rank closes its connections while a peer still uses them.
void store_depart(c10d::Store& store, int rank, int size, std::chrono::milliseconds bound);

// The owner-wait marks (Group::run_on_owner): the owner's `beat`-th sign of
// life (only the owner writes it), and that its `seq`-th piece of work is done.
void store_owner_alive(c10d::Store& store, int64_t beat);
// Throws h3::Error(kDistributed) when the mark is not a count ("the owner's sign
// of life on the store board is malformed ...").
int64_t store_owner_alive_count(c10d::Store& store);
void store_owner_done(c10d::Store& store, int64_t seq);
// Waits at most `slice` for the owner's `seq`-th piece of work; true once it is done.
bool store_owner_wait_done(c10d::Store& store, int64_t seq, std::chrono::milliseconds slice);

// The board half of a Group whose ranks share a rendezvous store (Gloo, NCCL):
// failures and the owner-wait marks of run_on_owner live in `store_`.
class StoreBoardGroup : public Group {
 protected:
  StoreBoardGroup(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                  std::chrono::milliseconds timeout, c10::Device device)
      : Group(rank, size, timeout, device), store_(std::move(store)) {}

  void post_failure(const PeerFailure& f) override { store_post_failure(*store_, f); }
  std::optional<PeerFailure> read_failure() override { return store_read_failure(*store_, size()); }
  void owner_alive() override { store_owner_alive(*store_, ++beats_); }
  int64_t owner_alive_count() override { return store_owner_alive_count(*store_); }
  void owner_done(int64_t seq) override { store_owner_done(*store_, seq); }
  bool owner_wait_done(int64_t seq, std::chrono::milliseconds slice) override {
    return store_owner_wait_done(*store_, seq, slice);
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::atomic<int64_t> beats_{0};  // the owner's signs of life (its heartbeat thread and itself)
};

}  // namespace h3::dist
