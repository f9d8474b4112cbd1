// Gloo backend. c10d runs each collective on a worker thread of the process
// group; this rank's thread waits for it in short slices so that it can give
// up on a peer's posted failure or on the group's timeout instead of waiting
// for ever (see docs/distributed.md, "Failures and timeouts").
#include "dist/gloo_group.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "admission/listener_filter.h"
#include "dist/host_memory.h"
#include "dist/store_board.h"
#include "h3/error.h"

namespace h3::dist {

namespace {

// LibTorch 2.x records every collective of every process group in a process-wide flight
// recorder (c10d/FlightRecorder.hpp) unless TORCH_FR_BUFFER_SIZE is 0. Its record() inserts the
// group's status into a std::map before it takes its mutex, so thread ranks (one process group
// each, enqueueing at once) corrupt that map and crash (seen here: a segfault in
// _Rb_tree_insert_and_rebalance under ProcessGroupGloo::enqueue, in about one run of the dist
// tests in three); it also captures a stack trace per collective. Off, at load time, before any
// group exists, unless the user set it.
const bool kFlightRecorderOff = [] {
  setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0);
  return true;
}();

// How often a waiting rank looks at the failure board and the clock.
constexpr std::chrono::milliseconds kWaitSlice{20};
constexpr std::chrono::milliseconds kGlooGrace{1000};

// The first line of a c10/Gloo message (the rest is a C++ backtrace).
std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

using GlooDevice = decltype(c10d::ProcessGroupGloo::createDefaultDevice());

// Gloo's device for `hostname` and the listening socket it opened at once (its port is not exposed,
// and LibTorch ships none of Gloo's headers): the one listener that appeared with it. Devices are
// made one at a time in this process; should another part of it open a listener at that very
// moment, the device is made again.
std::pair<GlooDevice, ListeningSocket> open_device(const std::string& hostname, int rank) {
  static std::mutex one_at_a_time;
  constexpr int kAttempts = 3;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    std::lock_guard<std::mutex> lock(one_at_a_time);
    const std::vector<ListeningSocket> before = listening_sockets();
    GlooDevice device;
    try {
      device = hostname.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                : c10d::ProcessGroupGloo::createDeviceForHostname(hostname);
    } catch (const std::exception& e) {
      throw Error(ErrorKind::kDistributed, "rank " + std::to_string(rank) + ": Gloo could not listen on " +
                                               (hostname.empty() ? "this host's address" : hostname) + ": " +
                                               first_line(e.what()));
    }
    std::vector<ListeningSocket> fresh;
    for (const ListeningSocket& l : listening_sockets()) {
      const bool old = std::any_of(before.begin(), before.end(),
                                   [&](const ListeningSocket& b) { return b.inode == l.inode; });
      if (!old) fresh.push_back(l);
    }
    if (fresh.size() == 1) return {device, fresh[0]};
  }
  throw Error(ErrorKind::kDistributed,
              "rank " + std::to_string(rank) +
                  ": could not tell Gloo's listening socket from others this process "
                  "opened at the same time (" +
                  std::to_string(kAttempts) +
                  " tries; it is found through /proc/self/fd and /proc/self/net/tcp, which must be "
                  "readable)");
}

// Every rank's listening address, then every rank's source addresses towards them (a rank's
// connections leave from the address its route picks, not necessarily the one it listens on),
// exchanged through the group's store (sealed in a process world: a stranger cannot add itself),
// become the members `listener` admits; then what it took before the filter is shut out.
void admit_members(c10d::Store& store, int rank, int size, std::chrono::milliseconds timeout,
                   const ListeningSocket& listener) {
  const std::string me = "rank " + std::to_string(rank);
  const auto exchange = [&](const std::string& what, const std::string& mine) {
    store.set("h3-gloo-" + what + "/" + std::to_string(rank), mine);
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back("h3-gloo-" + what + "/" + std::to_string(r));
    try {
      store.wait(keys, timeout);
    } catch (const std::exception& e) {
      throw Error(ErrorKind::kDistributed, me + ": the ranks did not all publish their Gloo " + what +
                                               " within " + std::to_string(timeout.count()) +
                                               " ms: " + first_line(e.what()));
    }
    std::vector<std::string> out;
    for (const std::string& k : keys) {
      const std::vector<uint8_t> v = store.get(k);
      out.emplace_back(v.begin(), v.end());
    }
    return out;
  };
  std::vector<IpAddress> members;
  const auto add = [&](const IpAddress& a) {
    if (std::find(members.begin(), members.end(), a) == members.end()) members.push_back(a);
  };
  std::string sources;
  for (const std::string& text : exchange("listener", listener.address.str())) {
    const IpAddress peer = parse_ip(text);
    add(peer);
    sources += (sources.empty() ? "" : " ") + source_address_towards(peer).str();
  }
  for (const std::string& list : exchange("sources", sources)) {
    std::istringstream words(list);
    for (std::string w; words >> w;) add(parse_ip(w));
  }
  admit_only(listener.fd, members);
  shut_out_strangers(listener, members, static_cast<int>(std::min<int64_t>(timeout.count(), 1000)));
}

class GlooGroup final : public StoreBoardGroup {
 public:
  GlooGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
            std::chrono::milliseconds timeout, const std::string& hostname, bool processes)
      : StoreBoardGroup(store, rank, size, timeout, c10::Device(c10::kCPU), /*pulse=*/processes) {
    // Gloo's own timeout is a backstop behind ours (which names the
    // operation): it bounds an abandoned collective still on the worker.
    auto options = c10d::ProcessGroupGloo::Options::create(timeout + std::max(timeout / 2, kGlooGrace));
    auto [device, listener] = open_device(hostname, rank);
    admit_members(*store, rank, size, timeout, listener);
    options->devices.push_back(device);
    options->threads = 1;  // this rank waits for each collective before it issues the next
    try {
      pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
    } catch (const std::exception& e) {
      throw Error(ErrorKind::kDistributed, "rank " + std::to_string(rank) + ": could not connect to the " +
                                               std::to_string(size) + " ranks of the Gloo group within " +
                                               std::to_string(timeout.count()) +
                                               " ms: " + first_line(e.what()));
    }
    // Processes that share a host move their tensors through shared memory (dist/host_memory.h);
    // thread ranks on Gloo (tests of the transport itself) keep it.
    if (processes && size > 1) shm_ = HostMemory::join(*store, rank, size, timeout);
  }

  ~GlooGroup() override {
    // Closing while a peer still finishes the last collective would cut its
    // connection mid-transfer (a false "connection closed"): leave together.
    // A broken group carries nothing worth finishing, and a lost peer (a killed
    // process) never departs: waiting for it would only hold up the next world.
    store_depart(*store_, rank(), size(), broken() ? std::chrono::milliseconds(0) : timeout());
    if (abandoned_ && !abandoned_->isCompleted()) {
      // A collective this rank gave up on still runs on the process group's
      // worker, and c10d's destructor joins it. It ends when the peers close
      // their connections (or at Gloo's backstop timeout): let a detached
      // thread wait for that so that this rank returns now.
      std::thread([pg = std::move(pg_), work = std::move(abandoned_)]() mutable {
        work.reset();
        pg.reset();
      }).detach();
    }
  }

  const char* backend() const override { return "gloo"; }

 protected:
  void raw_all_reduce(at::Tensor& t, ReduceOp op, const char* what) override {
    if (shm_) {
      op == ReduceOp::kSum ? shm_->all_reduce_sum(t, shm_check(what))
                           : shm_->all_reduce_max(t, shm_check(what));
      note_completed();
      return;
    }
    std::vector<at::Tensor> tensors{t};
    c10d::AllreduceOptions o;
    o.reduceOp = op == ReduceOp::kSum ? c10d::ReduceOp::SUM : c10d::ReduceOp::MAX;
    wait(start(what, [&] { return pg_->allreduce(tensors, o); }), what);
  }

  // Gloo's allgather over loopback TCP runs an order of magnitude slower than
  // its allreduce for large buffers (16 MiB per rank: 3 s against 65 ms on the
  // build machine; docs/performance-dist.md). So the gather is an allreduce:
  // every rank zeroes the whole output, writes its own slot and the ranks sum
  // the bit patterns as integers, which is exact for any dtype (x + 0 == x).
  void raw_all_gather(const at::Tensor& in, at::Tensor& out, const char* what) override {
    if (shm_) {
      shm_->all_gather(in, out, shm_check(what));
      note_completed();
      return;
    }
    const int64_t n = in.numel();
    out.zero_();
    out.narrow(0, rank() * n, n).copy_(in.view({-1}));
    const int64_t bytes = out.numel() * static_cast<int64_t>(out.element_size());
    at::Tensor bits = bytes % 4 == 0 ? out.view(at::kByte).view(at::kInt) : out.view(at::kByte);
    std::vector<at::Tensor> tensors{bits};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    wait(start(what, [&] { return pg_->allreduce(tensors, o); }), what);
  }

  void raw_all_to_all(const at::Tensor& in, at::Tensor& out, const std::vector<std::vector<int64_t>>& counts,
                      const char* what) override {
    // As bytes: any dtype travels (Gloo's alltoallv knows only some), counts scaled to match.
    const int64_t item = static_cast<int64_t>(in.element_size());
    if (shm_ && shm_->carries_all_to_all(counts, item)) {
      shm_->all_to_all(in, out, counts, shm_check(what));
      note_completed();
      return;
    }
    std::vector<int64_t> send(counts.size()), recv(counts.size());
    for (size_t r = 0; r < counts.size(); ++r) {
      send[r] = counts[static_cast<size_t>(rank())][r] * item;
      recv[r] = counts[r][static_cast<size_t>(rank())] * item;
    }
    at::Tensor input = in.view(at::kByte), output = out.view(at::kByte);
    c10d::AllToAllOptions o;
    wait(start(what, [&] { return pg_->alltoall_base(output, input, recv, send, o); }), what);
  }

  void raw_broadcast(at::Tensor& t, int root, const char* what) override {
    if (shm_) {
      shm_->broadcast(t, root, shm_check(what));
      note_completed();
      return;
    }
    std::vector<at::Tensor> tensors{t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    wait(start(what, [&] { return pg_->broadcast(tensors, o); }), what);
  }

 private:
  std::string here(const char* what) const { return "rank " + std::to_string(rank()) + ": " + what; }

  template <typename F>
  c10::intrusive_ptr<c10d::Work> start(const char* what, F&& issue) {
    try {
      return issue();
    } catch (const std::exception& e) {
      fail_and_post(here(what) + " could not start: " + first_line(e.what()));
    }
  }

  // Posts this rank's failure so that peers stop waiting for it, then throws.
  [[noreturn]] void fail_and_post(const std::string& message) {
    report_failure(message);
    fail(message);
  }

  [[noreturn]] void peer_failed(const PeerFailure& f) {
    fail("rank " + std::to_string(f.rank) + " failed: " + f.message);
  }

  void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    for (;;) {
      std::exception_ptr failure;
      try {
        work->wait(kWaitSlice);  // throws when the slice ends first, too
        note_completed();
        return;
      } catch (const std::exception&) {
        if (work->isCompleted()) {
          failure = work->exception();
          if (!failure) {  // finished just after the slice ended
            note_completed();
            return;
          }
        }
      }
      if (failure) {
        // The transport failed, typically because a peer closed its
        // connections after it failed: name that peer if it said so.
        if (auto f = peer_failure(); f && f->rank != rank()) peer_failed(*f);
        std::string why;
        try {
          std::rethrow_exception(failure);
        } catch (const std::exception& e) {
          why = first_line(e.what());
        }
        // A peer that died says nothing, and Gloo names only an address: the peers' signs of
        // life tell which rank it was (a process world's; empty for thread ranks).
        const std::string gone = gone_peers();
        if (gone.empty()) {
          if (auto f = peer_failure(); f && f->rank != rank()) peer_failed(*f);  // posted meanwhile
        }
        const std::string cause = gone.empty() ? why : gone + " (Gloo: " + why + ")";
        if (why.find("Timed out") != std::string::npos) {
          fail_and_post(here(what) + " timed out in the Gloo transport: " + cause);
        }
        fail_and_post(here(what) + " failed: " + cause);
      }
      if (auto f = peer_failure(); f && never_joins(*f)) {
        abandoned_ = work;
        peer_failed(*f);
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        abandoned_ = work;
        const std::string gone = gone_peers();
        fail_and_post(
            here(what) + " timed out after " + std::to_string(timeout().count()) + " ms: " +
            (gone.empty() ? "a peer rank did not join it (group of " + std::to_string(size()) + ")" : gone));
      }
    }
  }

  // What a rank waiting in the shared segment looks at every wait slice, as wait() does for
  // Gloo's work: a peer whose process ended (it closes no connection here; when it is rank 0 the
  // store went with it, so that is looked at first), a peer's posted failure, and the group's
  // timeout (a stopped peer is alive: it times out, as on Gloo).
  HostMemory::Check shm_check(const char* what) {
    const auto now = std::chrono::steady_clock::now();
    return [this, what, deadline = now + timeout(), next = now]() mutable {
      const auto t = std::chrono::steady_clock::now();
      if (t < next && t < deadline) return;
      next = t + kWaitSlice;
      if (const std::vector<int> ended = shm_->ended_ranks(); !ended.empty()) {
        if (ended.front() != 0) {
          if (auto f = peer_failure(); f && f->rank != rank()) peer_failed(*f);  // it failed, then left
        }
        std::string who;
        for (int r : ended) who += (who.empty() ? "rank " : " and rank ") + std::to_string(r);
        fail_and_post(here(what) + " failed: " + who + (ended.size() > 1 ? " are" : " is") +
                      " gone: its process ended (killed or crashed) while this rank waited for it; start it "
                      "again");
      }
      if (auto f = peer_failure(); f && never_joins(*f)) peer_failed(*f);
      if (t >= deadline) {
        const std::string gone = gone_peers();
        fail_and_post(
            here(what) + " timed out after " + std::to_string(timeout().count()) + " ms: " +
            (gone.empty() ? "a peer rank did not join it (group of " + std::to_string(size()) + ")" : gone));
      }
    };
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  c10::intrusive_ptr<c10d::Work> abandoned_;
  std::unique_ptr<HostMemory> shm_;
};

}  // namespace

std::unique_ptr<Group> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       std::chrono::milliseconds timeout, const std::string& hostname,
                                       bool processes) {
  return std::make_unique<GlooGroup>(store, rank, size, timeout, hostname, processes);
}

}  // namespace h3::dist
