// Cross-rank bookkeeping in the rendezvous store, shared by the backends:
// the failure board (each rank's first failure, read by its peers while they
// wait), the departures (ranks leave a group together), the owner-wait
// marks (peers wait for a rank that runs the caller's code) and, in a world of
// processes, each rank's signs of life (a rank whose connection failed tells a
// peer that is gone from one that is alive). Every record is
// one rank's own key, written with set (never a shared counter): in a process
// world's sealed store each is authenticated, and a bad value is refused, not
// a reason for the store to drop the connection (admission/sealed_store.h).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <utility>
#include <vector>

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

// A rank's signs of life in a world of processes: its own count (only that rank writes it),
// raised every beat from a thread of its own while its group lives (RankPulse). A rank that was
// SIGKILLed, or whose host or network went down, writes nothing more, neither a failure nor a
// departure: that is how its peers tell it from one that is alive or left on purpose.
void store_rank_alive(c10d::Store& store, int rank, int64_t beat);
// The rank's count; 0 before its first sign, and for a record that is not a count.
int64_t store_rank_alive_count(c10d::Store& store, int rank);
// The peers of `rank` (in a world of `size`) that are gone: none of them gave a new sign of life
// within `window` (looked at every `slice`), departed or posted a failure. Returns as soon as
// every peer did one of these (then empty); empty too when the store cannot be read (rank 0,
// which serves it, is gone: nothing can be told).
std::vector<int> store_gone_ranks(c10d::Store& store, int rank, int size, std::chrono::milliseconds window,
                                  std::chrono::milliseconds slice);

// Raises this rank's count every `beat` from a thread of its own while it lives (the first at once).
class RankPulse {
 public:
  RankPulse(c10::intrusive_ptr<c10d::Store> store, int rank, std::chrono::milliseconds beat);
  ~RankPulse();
  RankPulse(const RankPulse&) = delete;
  RankPulse& operator=(const RankPulse&) = delete;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::mutex m_;
  std::condition_variable cv_;
  bool finished_ = false;
  std::thread thread_;
};

// How often a rank of a world of processes shows that it lives: timeout/8, 10 ms to 250 ms.
std::chrono::milliseconds rank_pulse_beat(std::chrono::milliseconds timeout);
// How long a rank whose connection failed waits for a peer's sign of life before calling it
// gone: 8 of the longest beat, whatever the peers' timeouts (a loaded host's thread may stall
// for a moment; a killed process never beats again). Only a gone peer makes anyone wait it out.
constexpr std::chrono::milliseconds kRankGoneWindow{2000};

// The board half of a Group whose ranks share a rendezvous store (Gloo, NCCL):
// failures and the owner-wait marks of run_on_owner live in `store_`. With
// `pulse` (the ranks are processes of their own) this rank shows its signs
// of life there while the group lives, and gone_peers() can name a peer that died.
class StoreBoardGroup : public Group {
 protected:
  StoreBoardGroup(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                  std::chrono::milliseconds timeout, c10::Device device, bool pulse)
      : Group(rank, size, timeout, device), store_(std::move(store)) {
    if (pulse && size > 1) pulse_ = std::make_unique<RankPulse>(store_, rank, rank_pulse_beat(timeout));
  }

  // After this rank's transport failed or timed out: "rank R is gone: ..." naming the peers that
  // showed no sign of life within kRankGoneWindow and did not leave or fail on their own, and
  // what to do; "" when there are none, or the ranks show no signs of life (threads of one process).
  std::string gone_peers();

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

 private:
  // After store_: it stops before the store goes, and after a derived group's destructor has
  // marked this rank departed (a peer then never takes its quiet for death).
  std::unique_ptr<RankPulse> pulse_;
};

}  // namespace h3::dist
