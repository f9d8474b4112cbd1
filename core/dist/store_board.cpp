// The failure board and the departure count, kept in the rendezvous store
// that every rank of a group already shares (HashStore or TCPStore).
#include "dist/store_board.h"

#include <string>
#include <thread>
#include <vector>

namespace h3::dist {

namespace {

constexpr const char* kOwnerAliveKey = "h3/owner_alive";
constexpr const char* kOwnerDonePrefix = "h3/owner_done/";

std::string failure_key(int rank) {
  return "h3/failure/" + std::to_string(rank);
}
std::string departed_key(int rank) {
  return "h3/departed/" + std::to_string(rank);
}

std::vector<uint8_t> bytes_of(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

// "completed \n message", as a rank posts it; nullopt for anything else.
std::optional<PeerFailure> parse_failure(int rank, const std::vector<uint8_t>& raw) {
  const std::string value(raw.begin(), raw.end());
  const size_t nl = value.find('\n');
  if (nl == std::string::npos || nl == 0 || nl > 19 || value.find_first_not_of("0123456789") < nl) {
    return std::nullopt;
  }
  PeerFailure f;
  f.rank = rank;
  f.completed = std::stoll(value.substr(0, nl));
  f.message = value.substr(nl + 1);
  return f;
}

}  // namespace

void store_post_failure(c10d::Store& store, const PeerFailure& f) {
  const std::string key = failure_key(f.rank);
  if (store.check({key})) return;  // this rank's first failure is its cause
  store.set(key, bytes_of(std::to_string(f.completed) + "\n" + f.message));
}

std::optional<PeerFailure> store_read_failure(c10d::Store& store, int size) {
  std::optional<PeerFailure> cause;
  for (int r = 0; r < size; ++r) {
    const std::string key = failure_key(r);
    if (!store.check({key})) continue;
    const auto f = parse_failure(r, store.get(key));
    if (f && (!cause || f->completed < cause->completed)) cause = f;
  }
  return cause;
}

void store_depart(c10d::Store& store, int rank, int size, std::chrono::milliseconds bound) {
  try {
    store.set(departed_key(rank), std::vector<uint8_t>{1});
    std::vector<std::string> all;
    for (int r = 0; r < size; ++r) all.push_back(departed_key(r));
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (!store.check(all) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  } catch (...) {
    // The store is gone (its server left): nobody is left to wait for.
  }
}

void store_owner_alive(c10d::Store& store, int64_t beat) {
  store.set(kOwnerAliveKey, bytes_of(std::to_string(beat)));
}

int64_t store_owner_alive_count(c10d::Store& store) {
  if (!store.check({kOwnerAliveKey})) return 0;
  const std::vector<uint8_t> raw = store.get(kOwnerAliveKey);
  const std::string v(raw.begin(), raw.end());
  if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::stoll(v);
}

void store_owner_done(c10d::Store& store, int64_t seq) {
  store.set(kOwnerDonePrefix + std::to_string(seq), std::vector<uint8_t>{1});
}

bool store_owner_wait_done(c10d::Store& store, int64_t seq, std::chrono::milliseconds slice) {
  const std::string key = kOwnerDonePrefix + std::to_string(seq);
  if (store.check({key})) return true;
  try {
    // The store wakes the waiter as soon as the key is set (HashStore: a
    // condition variable; TCPStore: a notification from the server).
    store.wait({key}, slice);
    return true;
  } catch (const std::exception&) {
    return store.check({key});  // the slice ended first
  }
}

}  // namespace h3::dist
