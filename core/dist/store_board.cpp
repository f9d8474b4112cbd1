// The failure board and the departure count, kept in the rendezvous store
// that every rank of a group already shares (HashStore or TCPStore).
#include "dist/store_board.h"

#include <thread>

namespace h3::dist {

namespace {

constexpr const char* kFailureSeqKey = "h3/failure_seq";
constexpr const char* kFailureKey = "h3/failure";
constexpr const char* kDepartedKey = "h3/departed";
constexpr const char* kAllDepartedKey = "h3/all_departed";
constexpr const char* kOwnerAliveKey = "h3/owner_alive";
constexpr const char* kOwnerDonePrefix = "h3/owner_done/";

}  // namespace

void store_post_failure(c10d::Store& store, const PeerFailure& f) {
  // Only the first failure is kept: it is the cause, later ones are echoes.
  if (store.add(kFailureSeqKey, 1) != 1) return;
  std::string value = std::to_string(f.rank) + "\n" + std::to_string(f.completed) + "\n" + f.message;
  store.set(kFailureKey, std::vector<uint8_t>(value.begin(), value.end()));
}

std::optional<PeerFailure> store_read_failure(c10d::Store& store) {
  if (!store.check({kFailureKey})) return std::nullopt;
  std::vector<uint8_t> raw = store.get(kFailureKey);
  std::string value(raw.begin(), raw.end());
  // rank \n completed \n message
  size_t a = value.find('\n');
  size_t b = a == std::string::npos ? a : value.find('\n', a + 1);
  PeerFailure f;
  f.rank = std::stoi(value.substr(0, a));
  if (b != std::string::npos) {
    f.completed = std::stoll(value.substr(a + 1, b - a - 1));
    f.message = value.substr(b + 1);
  }
  return f;
}

void store_depart(c10d::Store& store, int size, std::chrono::milliseconds bound) {
  try {
    if (store.add(kDepartedKey, 1) >= size) {
      store.set(kAllDepartedKey, std::vector<uint8_t>{1});
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (!store.check({kAllDepartedKey}) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  } catch (...) {
    // The store is gone (its server left): nobody is left to wait for.
  }
}

void store_owner_alive(c10d::Store& store) {
  store.add(kOwnerAliveKey, 1);
}

int64_t store_owner_alive_count(c10d::Store& store) {
  return store.add(kOwnerAliveKey, 0);
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
