// Shared-memory backend. A collective is a short sequence of meetings: every rank shows where
// its buffer is and arrives; once all have, each copies or reduces straight between the
// buffers; a last meeting keeps every buffer alive until no peer reads it any more.
//
// Failures: a meeting waits at most timeout() and ends at once when a rank posts a failure (the
// board lives here, under the same mutex as the meeting count, so a timeout and a late arrival
// cannot both win). A rank that gives up first waits until no peer is still copying to or from
// its buffers (bounded work: a copy in progress finishes), so that returning cannot pull
// memory from under a peer.
//
// Ranks out of step (one skipped or added a collective) would still meet, since a meeting is
// only a count: each would copy by its own layout from buffers laid out for another collective,
// and their counts of ranks at work would go apart, so that a rank giving up later waited for
// ever for a peer to stop working. So each rank says at every meeting where it is (the
// operation, the meeting's number in it, a digest of the sizes), and a meeting whose ranks
// differ fails at once on every rank, naming each rank's collective, before any buffer is read.
#include "dist/memory_group.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "h3/error.h"

namespace h3::dist {

// Which meeting a rank arrives at: ranks at one meeting must be at the same one.
struct MeetingPlace {
  const char* what = "";  // the public operation (Group's `what`)
  int index = 0;          // 1-based, of `meetings` in the operation's transport collective
  int meetings = 0;
  int64_t bytes = 0;    // the bytes this rank's collective moves in all (for the message)
  uint64_t layout = 0;  // a digest of every rank's sizes, which paired ranks computed alike

  bool same_as(const MeetingPlace& o) const {
    return std::strcmp(what, o.what) == 0 && index == o.index && meetings == o.meetings && bytes == o.bytes &&
           layout == o.layout;
  }
  std::string describe() const {
    return std::string(what) + " (meeting " + std::to_string(index) + " of " + std::to_string(meetings) +
           ", " + std::to_string(bytes) + " bytes)";
  }
};

class MemoryWorld {
 public:
  explicit MemoryWorld(int size)
      : size(size), exposed(static_cast<size_t>(size), nullptr), places(static_cast<size_t>(size)) {}

  const int size;
  std::mutex m;
  std::condition_variable cv;
  // The meeting in progress: how many ranks have arrived, and how many meetings completed.
  int arrived = 0;
  int64_t generation = 0;
  // Ranks released from a meeting into work on their peers' buffers and not yet at the next.
  int working = 0;
  // Per rank: the buffer it shows its peers in the collective in progress.
  std::vector<uint8_t*> exposed;
  // Per rank: the meeting it arrived at (compared once all have).
  std::vector<MeetingPlace> places;
  // The failure board: the first failure a rank posted. Once set, no meeting completes.
  std::optional<PeerFailure> failure;
  // Set with `failure` when the ranks met out of step: what each rank was in (every rank's
  // error names its own collective and this).
  std::string out_of_step;
  // run_on_owner's marks: the owner's signs of life, and the last piece of work done.
  int64_t owner_alive = 0;
  int64_t owner_done = 0;
};

std::shared_ptr<MemoryWorld> make_memory_world(int size) {
  return std::make_shared<MemoryWorld>(size);
}

namespace {

// FNV-1a over int64 values: the layout digest of a meeting.
uint64_t digest(std::initializer_list<int64_t> head, const std::vector<int64_t>& rest = {}) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xffu;
      h *= 1099511628211ull;
    }
  };
  for (int64_t v : head) mix(v);
  for (int64_t v : rest) mix(v);
  return h;
}

// Where rank `r` of `size` reduces in an all_reduce of n elements: an even split.
std::pair<int64_t, int64_t> share(int64_t n, int size, int r) {
  return {n * r / size, n * (r + 1) / size};
}

class MemoryGroup final : public Group {
 public:
  MemoryGroup(std::shared_ptr<MemoryWorld> world, int rank, std::chrono::milliseconds timeout)
      : Group(rank, world->size, timeout, c10::Device(c10::kCPU)), w_(std::move(world)) {}

  const char* backend() const override { return "memory"; }

 protected:
  void raw_all_reduce(at::Tensor& t, ReduceOp op, const char* what) override {
    const int64_t n = t.numel();
    const int64_t item = static_cast<int64_t>(t.element_size());
    const uint64_t layout = digest({1, n, item, static_cast<int64_t>(op)});
    const auto at = [&](int index) { return MeetingPlace{what, index, 3, n * item, layout}; };
    meet(at(1), /*then_work=*/true, static_cast<uint8_t*>(t.data_ptr()));
    work(what, [&] {
      // Reduce-scatter: this rank sums its share over every rank's buffer, in rank order (the
      // same order on every rank, so every rank ends with the same bits), into its own buffer.
      const auto [lo, hi] = share(n, size(), rank());
      if (hi == lo) return;
      auto part = [&](int r) {
        return at::from_blob(w_->exposed[static_cast<size_t>(r)] + lo * item, {hi - lo}, t.options());
      };
      at::Tensor mine = part(rank());
      // From rank 2 on, this rank's values are overwritten before their turn comes.
      const at::Tensor own = rank() >= 2 ? mine.clone() : mine;
      auto term = [&](int r) { return r == rank() ? own : part(r); };
      if (op == ReduceOp::kSum) {
        at::add_out(mine, term(0), term(1));
        for (int r = 2; r < size(); ++r) mine.add_(term(r));
      } else {
        at::maximum_out(mine, term(0), term(1));
        for (int r = 2; r < size(); ++r) at::maximum_out(mine, mine, term(r));
      }
    });
    meet(at(2), /*then_work=*/true, nullptr);
    work(what, [&] {
      // All-gather of the shares: each is final in its owner's buffer.
      uint8_t* mine = static_cast<uint8_t*>(t.data_ptr());
      for (int r = 0; r < size(); ++r) {
        const auto [lo, hi] = share(n, size(), r);
        if (r != rank() && hi > lo) {
          std::memcpy(mine + lo * item, w_->exposed[static_cast<size_t>(r)] + lo * item,
                      static_cast<size_t>((hi - lo) * item));
        }
      }
    });
    meet(at(3), /*then_work=*/false, nullptr);
    note_completed();
  }

  // Equal parts (the metadata rows, broadcast_int) are the uneven gather's special case.
  void raw_all_gather(const at::Tensor& in, at::Tensor& out, const char* what) override {
    const int64_t bytes = in.numel() * static_cast<int64_t>(in.element_size());
    std::vector<int64_t> offsets(static_cast<size_t>(size()) + 1);
    for (int r = 0; r <= size(); ++r) offsets[static_cast<size_t>(r)] = r * bytes;
    raw_all_gather_uneven(in, out, offsets, what);
  }

  bool gathers_uneven() const override { return true; }

  void raw_all_gather_uneven(const at::Tensor& in, at::Tensor& out, const std::vector<int64_t>& offsets,
                             const char* what) override {
    const auto at = [&](int index) {
      return MeetingPlace{what, index, 2, offsets.back(), digest({2}, offsets)};
    };
    meet(at(1), /*then_work=*/true, static_cast<uint8_t*>(const_cast<void*>(in.data_ptr())));
    work(what, [&] {
      uint8_t* dst = static_cast<uint8_t*>(out.data_ptr());
      for (int r = 0; r < size(); ++r) {
        const int64_t bytes = offsets[static_cast<size_t>(r) + 1] - offsets[static_cast<size_t>(r)];
        if (bytes > 0) {
          std::memcpy(dst + offsets[static_cast<size_t>(r)], w_->exposed[static_cast<size_t>(r)],
                      static_cast<size_t>(bytes));
        }
      }
    });
    meet(at(2), /*then_work=*/false, nullptr);
    note_completed();
  }

  void raw_all_to_all(const at::Tensor& in, at::Tensor& out, const std::vector<std::vector<int64_t>>& counts,
                      const char* what) override {
    const int64_t item = static_cast<int64_t>(in.element_size());
    std::vector<int64_t> flat;
    int64_t elements = 0;
    for (const auto& row : counts) {
      for (int64_t c : row) {
        flat.push_back(c);
        elements += c;
      }
    }
    const uint64_t layout = digest({3, item}, flat);
    const auto at = [&](int index) { return MeetingPlace{what, index, 2, elements * item, layout}; };
    meet(at(1), /*then_work=*/true, static_cast<uint8_t*>(const_cast<void*>(in.data_ptr())));
    work(what, [&] {
      // Straight from each sender's buffer: its part for this rank starts after its parts for
      // the ranks before this one.
      uint8_t* dst = static_cast<uint8_t*>(out.data_ptr());
      const size_t me = static_cast<size_t>(rank());
      for (size_t s = 0; s < counts.size(); ++s) {
        int64_t from = 0;
        for (size_t d = 0; d < me; ++d) from += counts[s][d];
        const int64_t n = counts[s][me];
        if (n > 0) std::memcpy(dst, w_->exposed[s] + from * item, static_cast<size_t>(n * item));
        dst += n * item;
      }
    });
    meet(at(2), /*then_work=*/false, nullptr);
    note_completed();
  }

  void raw_broadcast(at::Tensor& t, int root, const char* what) override {
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    const int64_t n = static_cast<int64_t>(bytes);
    const auto at = [&](int index) { return MeetingPlace{what, index, 2, n, digest({4, n, root})}; };
    meet(at(1), /*then_work=*/true, static_cast<uint8_t*>(t.data_ptr()));
    work(what, [&] {
      if (rank() != root) std::memcpy(t.data_ptr(), w_->exposed[static_cast<size_t>(root)], bytes);
    });
    meet(at(2), /*then_work=*/false, nullptr);
    note_completed();
  }

  void post_failure(const PeerFailure& f) override {
    {
      std::lock_guard<std::mutex> lk(w_->m);
      if (!w_->failure) w_->failure = f;  // the first is the cause; later ones are echoes
    }
    w_->cv.notify_all();
  }

  std::optional<PeerFailure> read_failure() override {
    std::lock_guard<std::mutex> lk(w_->m);
    return w_->failure;
  }

  void owner_alive() override {
    std::lock_guard<std::mutex> lk(w_->m);
    ++w_->owner_alive;
  }

  int64_t owner_alive_count() override {
    std::lock_guard<std::mutex> lk(w_->m);
    return w_->owner_alive;
  }

  void owner_done(int64_t seq) override {
    {
      std::lock_guard<std::mutex> lk(w_->m);
      w_->owner_done = std::max(w_->owner_done, seq);
    }
    w_->cv.notify_all();
  }

  bool owner_wait_done(int64_t seq, std::chrono::milliseconds slice) override {
    std::unique_lock<std::mutex> lk(w_->m);
    // A posted failure ends the slice too: run_on_owner reads it next.
    w_->cv.wait_for(lk, slice, [&] { return w_->owner_done >= seq || w_->failure.has_value(); });
    return w_->owner_done >= seq;
  }

 private:
  std::string here(const char* what) const { return "rank " + std::to_string(rank()) + ": " + what; }

  // Arrives at the meeting `place`, showing `expose` to the peers (when not null), and returns
  // once every rank has arrived at the same place. `then_work`: the ranks touch each other's
  // buffers after it (the same on every rank at one place).
  void meet(const MeetingPlace& place, bool then_work, uint8_t* expose) {
    const char* what = place.what;
    std::unique_lock<std::mutex> lk(w_->m);
    stop_working_locked();
    if (w_->failure) give_up_locked(lk, what, /*timed_out=*/false);
    if (expose) w_->exposed[static_cast<size_t>(rank())] = expose;
    w_->places[static_cast<size_t>(rank())] = place;
    const int64_t generation = w_->generation;
    if (++w_->arrived == size()) {
      w_->arrived = 0;
      // Nobody works on the buffers of ranks that are in different collectives: the meeting
      // fails on every rank instead (the others wake to the failure).
      if (const std::string out = out_of_step_locked(); !out.empty()) {
        w_->out_of_step = out;
        w_->failure = PeerFailure{first_out_of_step_locked(), out, 0};
        w_->cv.notify_all();
        give_up_locked(lk, what, /*timed_out=*/false);
      }
      ++w_->generation;
      w_->working = then_work ? size() : 0;
      working_ = then_work;
      lk.unlock();
      w_->cv.notify_all();
      return;
    }
    const bool met = w_->cv.wait_for(lk, timeout(),
                                     [&] { return w_->generation != generation || w_->failure.has_value(); });
    if (w_->generation != generation) {
      working_ = then_work;
      return;
    }
    give_up_locked(lk, what, /*timed_out=*/!met);
  }

  // Runs this rank's copies of a collective; what they throw (an allocation) fails the world.
  template <typename F>
  void work(const char* what, F&& body) {
    try {
      body();
    } catch (const std::exception& e) {
      std::unique_lock<std::mutex> lk(w_->m);
      stop_working_locked();
      const std::string message = here(what) + " failed: " + e.what();
      if (!w_->failure) w_->failure = PeerFailure{rank(), message, 0};
      w_->cv.notify_all();
      // Peers may still copy from this rank's buffers: they stop at their next meeting.
      w_->cv.wait(lk, [&] { return w_->working == 0; });
      lk.unlock();
      fail(message);
    }
  }

  void stop_working_locked() {
    if (!working_) return;
    working_ = false;
    if (--w_->working == 0) w_->cv.notify_all();
  }

  // Empty when every rank arrived at the same place; else each rank's place, e.g. "the ranks are
  // out of step: rank 0 is in broadcast_int (meeting 1 of 2, 32 bytes), rank 1 is in
  // all_reduce_int (meeting 1 of 3, 8 bytes); ...".
  std::string out_of_step_locked() const {
    const auto& places = w_->places;
    bool same = true;
    for (const MeetingPlace& p : places) same = same && p.same_as(places[0]);
    if (same) return {};
    std::string s = "the ranks are out of step: ";
    for (int r = 0; r < size(); ++r) {
      s += (r == 0 ? "rank " : ", rank ") + std::to_string(r) + " is in " +
           places[static_cast<size_t>(r)].describe();
    }
    return s +
           "; a rank skipped, added or reordered a collective (every rank must run the same collectives in "
           "the same order)";
  }

  // The lowest rank whose place differs from rank 0's: the failure board's culprit.
  int first_out_of_step_locked() const {
    for (int r = 1; r < size(); ++r) {
      if (!w_->places[static_cast<size_t>(r)].same_as(w_->places[0])) return r;
    }
    return 0;
  }

  // Leaves the world: posts the timeout (unless a peer's failure is the cause), waits until no
  // peer still copies to or from this rank's buffers, then throws.
  [[noreturn]] void give_up_locked(std::unique_lock<std::mutex>& lk, const char* what, bool timed_out) {
    std::string message;
    if (timed_out && !w_->failure) {
      message = here(what) + " timed out after " + std::to_string(timeout().count()) +
                " ms: a peer rank did not join it (group of " + std::to_string(size()) + ")";
      w_->failure = PeerFailure{rank(), message, 0};
      w_->cv.notify_all();
    } else if (!w_->out_of_step.empty()) {
      message = here(what) + ": " + w_->out_of_step;
    } else if (w_->failure->rank == rank()) {
      message = here(what) + ": this rank failed earlier: " + w_->failure->message;
    } else {
      message = "rank " + std::to_string(w_->failure->rank) + " failed: " + w_->failure->message;
    }
    w_->cv.wait(lk, [&] { return w_->working == 0; });
    lk.unlock();
    fail(message);
  }

  std::shared_ptr<MemoryWorld> w_;
  bool working_ = false;  // released from a meeting into work on peers' buffers
};

}  // namespace

std::unique_ptr<Group> make_memory_group(std::shared_ptr<MemoryWorld> world, int rank,
                                         std::chrono::milliseconds timeout) {
  return std::make_unique<MemoryGroup>(std::move(world), rank, timeout);
}

}  // namespace h3::dist
