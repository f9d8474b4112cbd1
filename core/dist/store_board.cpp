// The failure board and the departure count, kept in the rendezvous store
// that every rank of a group already shares (HashStore or TCPStore).
#include "dist/store_board.h"

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "h3/error.h"

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
std::string alive_key(int rank) {
  return "h3/alive/" + std::to_string(rank);
}

std::vector<uint8_t> bytes_of(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

// At most the first 40 bytes of a value, printable ASCII only: what a refusal quotes.
std::string preview(const std::string& value) {
  std::string out;
  for (size_t i = 0; i < value.size() && i < 40; ++i) {
    const char c = value[i];
    out += c >= 0x20 && c < 0x7f ? c : '?';
  }
  return "'" + out + (value.size() > 40 ? "...'" : "'");
}

// A count of at most 19 decimal digits that fits an int64: "" when it is one, else what is wrong.
std::string count_problem(const std::string& digits) {
  if (digits.empty()) return "is empty";
  if (digits.find_first_not_of("0123456789") != std::string::npos) return "is not a decimal number";
  if (digits.size() > 19 || (digits.size() == 19 && digits > "9223372036854775807")) {
    return "is larger than a 64-bit count";
  }
  return "";
}

// "completed \n message", as a rank posts it; nullopt for anything else, and what is wrong.
std::optional<PeerFailure> parse_failure(int rank, const std::vector<uint8_t>& raw, std::string* why) {
  const std::string value(raw.begin(), raw.end());
  const size_t nl = value.find('\n');
  if (value.empty()) {
    *why = "it is empty";
    return std::nullopt;
  }
  if (nl == std::string::npos) {
    *why = "it has no line with the count of collectives the rank completed";
    return std::nullopt;
  }
  if (const std::string p = count_problem(value.substr(0, nl)); !p.empty()) {
    *why = "the count of collectives " + p;
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
    // A record that cannot be read is still that rank's failure (only a failing rank writes the
    // key): its peers stop waiting for it, and the message says what was wrong with the record.
    std::string why, quoted;
    std::optional<PeerFailure> f;
    try {
      const std::vector<uint8_t> raw = store.get(key);
      f = parse_failure(r, raw, &why);
      quoted = ": " + preview(std::string(raw.begin(), raw.end()));
    } catch (const Error& e) {
      why = e.what();  // a sealed value that fails authentication
    }
    if (!f)
      f = PeerFailure{r, "its failure record on the store board is malformed (" + why + ")" + quoted, 0};
    if (!cause || f->completed < cause->completed) cause = f;
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
  if (const std::string p = count_problem(v); !p.empty()) {
    throw Error(
        ErrorKind::kDistributed,
        "the owner's sign of life on the store board is malformed (its count " + p + "): " + preview(v));
  }
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

void store_rank_alive(c10d::Store& store, int rank, int64_t beat) {
  store.set(alive_key(rank), bytes_of(std::to_string(beat)));
}

int64_t store_rank_alive_count(c10d::Store& store, int rank) {
  const std::string key = alive_key(rank);
  if (!store.check({key})) return 0;
  const std::vector<uint8_t> raw = store.get(key);
  const std::string v(raw.begin(), raw.end());
  return count_problem(v).empty() ? std::stoll(v) : 0;
}

std::vector<int> store_gone_ranks(c10d::Store& store, int rank, int size, std::chrono::milliseconds window,
                                  std::chrono::milliseconds slice) {
  try {
    // A peer is settled once it showed a new sign of life, departed or posted a failure.
    std::vector<int64_t> first(static_cast<size_t>(size), 0);
    std::vector<bool> settled(static_cast<size_t>(size), false);
    settled[static_cast<size_t>(rank)] = true;
    for (int r = 0; r < size; ++r) first[static_cast<size_t>(r)] = store_rank_alive_count(store, r);
    const auto deadline = std::chrono::steady_clock::now() + window;
    for (;;) {
      for (int r = 0; r < size; ++r) {
        if (settled[static_cast<size_t>(r)]) continue;
        settled[static_cast<size_t>(r)] = store.check({departed_key(r)}) || store.check({failure_key(r)}) ||
                                          store_rank_alive_count(store, r) != first[static_cast<size_t>(r)];
      }
      if (std::all_of(settled.begin(), settled.end(), [](bool b) { return b; })) return {};
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(slice);
    }
    std::vector<int> gone;
    for (int r = 0; r < size; ++r)
      if (!settled[static_cast<size_t>(r)]) gone.push_back(r);
    return gone;
  } catch (...) {
    return {};  // the store is unreachable: its server (rank 0) is gone, and nothing can be told
  }
}

RankPulse::RankPulse(c10::intrusive_ptr<c10d::Store> store, int rank, std::chrono::milliseconds beat)
    : store_(std::move(store)) {
  thread_ = std::thread([this, rank, beat] {
    int64_t n = 0;
    std::unique_lock<std::mutex> lk(m_);
    do {
      try {
        store_rank_alive(*store_, rank, ++n);
      } catch (...) {
        // The store is unreachable: the peers will find out through their connections.
      }
    } while (!cv_.wait_for(lk, beat, [&] { return finished_; }));
  });
}

RankPulse::~RankPulse() {
  {
    std::lock_guard<std::mutex> lk(m_);
    finished_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::chrono::milliseconds rank_pulse_beat(std::chrono::milliseconds timeout) {
  return std::clamp<std::chrono::milliseconds>(timeout / 8, std::chrono::milliseconds(10),
                                               std::chrono::milliseconds(250));
}

std::string StoreBoardGroup::gone_peers() {
  if (!pulse_) return "";
  const std::chrono::milliseconds window = kRankGoneWindow;
  const std::vector<int> gone =
      store_gone_ranks(*store_, rank(), size(), window, std::chrono::milliseconds(50));
  if (gone.empty()) return "";
  std::string names;
  for (size_t i = 0; i < gone.size(); ++i) {
    names += (i == 0 ? "" : i + 1 == gone.size() ? " and " : ", ") + std::to_string(gone[i]);
  }
  if (gone.size() == 1) {
    return "rank " + names + " is gone: it showed no sign of life for " + std::to_string(window.count()) +
           " ms and neither failed nor left on its own (its process was killed or crashed, or its host or "
           "the network to it went down); start it again";
  }
  return "ranks " + names + " are gone: they showed no sign of life for " + std::to_string(window.count()) +
         " ms and neither failed nor left on their own (their processes were killed or crashed, or their "
         "hosts or the network to them went down); start them again";
}

}  // namespace h3::dist
