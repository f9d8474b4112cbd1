// The places of rank 0's store front end (admission/store_front.h), so that connections that prove
// nothing cannot keep a worker out (docs/distributed.md, "What a stranger can do"). A connection
// still proving the token holds an *unproven* place, for at most the handshake deadline; one
// that proved it moves to a *proven* place, which silent connections can never take. The
// unproven places are shared out by source address: one address holds at most `per_source` of
// them, and when every place is taken, a newcomer from an address that holds fewer than the
// busiest one takes the place of that address's oldest connection, provided that connection has
// waited at least `settle` (so that a worker's own handshake, one round trip, is never cut short
// by a crowd that keeps reconnecting). So a stranger from a few addresses cannot keep a worker
// from another address out; one from many addresses that renews its connections as fast as they
// are closed can make a worker wait, and the worker asks again until its timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <string>

#include "admission/proc_sockets.h"

namespace h3::dist {

// The source a peer's address counts as for the shares: an IPv4 address itself (an IPv4-mapped
// IPv6 address as the IPv4 address it maps), an IPv6 address its /64 prefix (a host is commonly
// given a whole /64, so shares per IPv6 address would not hold a crowd from one host back).
std::string source_of(const IpAddress& a);

struct SlotLimits {
  int unproven = 8;                       // connections still proving the token, at once
  int per_source = 2;                     // of those, from one address
  int proven = 8;                         // connections that proved it
  std::chrono::milliseconds settle{500};  // an unproven connection's place is never taken sooner
};

class FrontEndSlots {
 public:
  using Clock = std::chrono::steady_clock;
  explicit FrontEndSlots(SlotLimits limits) : limits_(limits) {}

  enum class Admit { kAdmitted, kSourceFull, kFull };
  struct Decision {
    Admit admit = Admit::kAdmitted;
    std::optional<uint64_t> evicted;  // the unproven connection whose place the newcomer took
  };
  // Connection `id` from `source` arrives at `now` (ids are the caller's, unique).
  Decision arrive(uint64_t id, const std::string& source, Clock::time_point now);
  // `id` proved the token: it leaves its unproven place for a proven one (kProven); kFull (its
  // unproven place freed all the same) when every proven place is taken; kEvicted when a newcomer
  // took its place before.
  enum class Proved { kProven, kFull, kEvicted };
  Proved prove(uint64_t id);
  // `id` closed (proven or not, or already evicted: then nothing happens).
  void leave(uint64_t id);

  int unproven() const { return static_cast<int>(unproven_.size()); }
  int proven() const { return proven_; }
  int unproven_from(const std::string& source) const;

 private:
  struct Entry {
    uint64_t id;
    std::string source;
    Clock::time_point since;
  };
  SlotLimits limits_;
  std::list<Entry> unproven_;  // oldest first
  std::map<std::string, int> per_source_;
  std::map<uint64_t, bool> open_;  // id -> proven
  int proven_ = 0;

  void drop_unproven(std::list<Entry>::iterator it);
};

}  // namespace h3::dist
