// Thread worlds over a private HashStore, and TCP worlds over a TCPStore.
#include "dist/world.h"

#include <algorithm>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "dist/gloo_group.h"
#include "dist/memory_group.h"
#include "dist/store_board.h"
#include "h3/error.h"
#include "h3_config.h"
#if H3_HAVE_CUDA && H3_TORCH_HAS_CUDA
#include "dist/nccl_group.h"
#endif

namespace h3::dist {

namespace {

RankResult failed(int rank, std::exception_ptr e) {
  RankResult r{rank, false, "", e};
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    r.error = ex.what();
  } catch (...) {
    r.error = "unknown exception";
  }
  return r;
}

void check_timeout(const WorldOptions& opts) {
  if (opts.timeout.count() <= 0) {
    throw Error(ErrorKind::kInvalidArgument,
                "world timeout must be positive, got " + std::to_string(opts.timeout.count()) + " ms");
  }
}

// Gloo binds to the interface that reaches `host`: loopback for a local
// world, the machine's own hostname otherwise.
std::string gloo_hostname(const std::string& host) {
  if (host == "localhost" || host.rfind("127.", 0) == 0) return "127.0.0.1";
  return std::string();
}

c10d::TCPStoreOptions store_options(int port, bool server, int size, const WorldOptions& opts) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  o.isServer = server;
  o.numWorkers = size;
  o.waitWorkers = false;  // the Gloo connection is the real rendezvous, bounded by the timeout
  o.timeout = opts.timeout;
  return o;
}

void check_backend(const WorldOptions& opts);

void check_world(int size, int rank, const WorldOptions& opts) {
  check_timeout(opts);
  check_backend(opts);
  if (size < 1)
    throw Error(ErrorKind::kInvalidArgument, "world size must be at least 1, got " + std::to_string(size));
  if (rank < 0 || rank >= size) {
    throw Error(ErrorKind::kInvalidArgument,
                "rank " + std::to_string(rank) + " is outside a world of " + std::to_string(size) + " ranks");
  }
}

// The backend's group for one rank; `processes`: the ranks are processes of their own (they show
// their signs of life, and a lost one is named: dist/store_board.h).
std::unique_ptr<Group> make_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                  const WorldOptions& opts, const std::string& gloo_host, int cuda_device,
                                  bool processes) {
  if (opts.backend == Backend::kGloo)
    return make_gloo_group(store, rank, size, opts.timeout, gloo_host, processes);
#if H3_HAVE_CUDA && H3_TORCH_HAS_CUDA
  return make_nccl_group(store, rank, size, opts.timeout, cuda_device, processes);
#else
  (void)cuda_device;
  (void)processes;
  throw Error(
      ErrorKind::kInvalidArgument,
      "rank " + std::to_string(rank) +
          ": this build has no NCCL backend (it needs NCCL and a CUDA LibTorch at build time); use gloo");
#endif
}

void check_backend(const WorldOptions& opts) {
  if (opts.backend == Backend::kNccl && !has_nccl()) {
    throw Error(ErrorKind::kInvalidArgument,
                "this build has no NCCL backend (it needs NCCL and a CUDA LibTorch at build time); use gloo");
  }
}

// run_threads over shared memory: nothing to connect, so a group cannot fail to form.
std::vector<RankResult> run_memory_threads(int size, const std::function<void(Group&)>& fn,
                                           const WorldOptions& opts) {
  std::vector<RankResult> results(size);
  auto world = make_memory_world(size);
  std::vector<std::thread> threads;
  threads.reserve(size);
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      results[rank] = RankResult{rank, true, "", nullptr};
      auto group = make_memory_group(world, rank, opts.timeout);
      try {
        fn(*group);
      } catch (...) {
        results[rank] = failed(rank, std::current_exception());
        group->report_failure(results[rank].error);  // peers waiting for this rank stop at once
      }
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace

bool has_nccl() {
  return H3_HAVE_CUDA && H3_TORCH_HAS_CUDA;
}

void rethrow_first_failure(const std::vector<RankResult>& results) {
  for (const auto& r : results) {
    if (r.ok) continue;
    if (r.exception) std::rethrow_exception(r.exception);
    throw Error(ErrorKind::kDistributed, "rank " + std::to_string(r.rank) + " failed: " + r.error);
  }
}

std::vector<RankResult> run_threads(int size, const std::function<void(Group&)>& fn,
                                    const WorldOptions& opts) {
  check_world(size, 0, opts);
  std::vector<RankResult> results(size);
  if (size == 1) {
    results[0] = RankResult{0, true, "", nullptr};
    try {
      auto g = make_single_group();
      fn(*g);
    } catch (...) {
      results[0] = failed(0, std::current_exception());
    }
    return results;
  }

  if (opts.backend == Backend::kGloo && opts.thread_transport == ThreadTransport::kSharedMemory) {
    return run_memory_threads(size, fn, opts);
  }
  auto store = c10::make_intrusive<c10d::HashStore>();
  store->setTimeout(opts.timeout);
  std::vector<std::thread> threads;
  threads.reserve(size);
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      results[rank] = RankResult{rank, true, "", nullptr};
      std::unique_ptr<Group> group;
      try {
        group =
            make_group(store, rank, size, opts, "127.0.0.1", opts.cuda_device >= 0 ? opts.cuda_device : rank,
                       /*processes=*/false);
      } catch (...) {
        // A peer that failed while this rank was still connecting is the cause.
        std::optional<PeerFailure> cause;
        try {
          cause = store_read_failure(*store, size);
        } catch (...) {
        }
        if (cause && cause->rank != rank) {
          results[rank] = failed(rank, std::make_exception_ptr(Error(ErrorKind::kDistributed,
                                                                     "rank " + std::to_string(cause->rank) +
                                                                         " failed: " + cause->message)));
          return;
        }
        results[rank] = failed(rank, std::current_exception());
        try {
          store_post_failure(
              *store, PeerFailure{rank, results[rank].error, 0});  // peers still connecting stop waiting
        } catch (...) {
        }
        store_depart(*store, rank, size, std::chrono::milliseconds(0));
        return;
      }
      try {
        fn(*group);
      } catch (...) {
        results[rank] = failed(rank, std::current_exception());
        // Posted before the group closes (its destructor waits for the
        // peers to leave): peers waiting for this rank see it within a slice.
        group->report_failure(results[rank].error);
      }
      group.reset();
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

std::unique_ptr<Group> join_tcp(const std::string& host, int port, int size, int rank,
                                const WorldOptions& opts) {
  check_world(size, rank, opts);
  if (port < 1 || port > 65535) {
    throw Error(ErrorKind::kInvalidArgument, "join_tcp: port " + std::to_string(port) +
                                                 " is not a TCP port (1..65535); rank 0 of a world on a "
                                                 "system-chosen port uses TcpServer");
  }
  if (rank == 0) {
    TcpServer server(host, port, size, opts);
    return server.join();
  }
  c10::intrusive_ptr<c10d::TCPStore> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(host, store_options(port, false, size, opts));
  } catch (const std::exception& e) {
    std::string what = e.what();
    throw Error(ErrorKind::kDistributed, "rank " + std::to_string(rank) +
                                             ": could not reach the rendezvous store at " + host + ":" +
                                             std::to_string(port) + ": " + what.substr(0, what.find('\n')));
  }
  if (size == 1) return make_single_group();
  return make_group(store, rank, size, opts, gloo_hostname(host), std::max(opts.cuda_device, 0),
                    /*processes=*/true);
}

std::unique_ptr<Group> make_store_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                        const WorldOptions& opts, const std::string& gloo_host) {
  check_world(size, rank, opts);
  return make_group(store, rank, size, opts, gloo_host, std::max(opts.cuda_device, 0), /*processes=*/true);
}

TcpServer::TcpServer(const std::string& host, int port, int size, const WorldOptions& opts)
    : host_(host), size_(size), opts_(opts) {
  check_world(size, 0, opts);
  if (port < 0 || port > 65535) {
    throw Error(ErrorKind::kInvalidArgument,
                "TcpServer: port " + std::to_string(port) + " is not a TCP port (0 lets the system choose)");
  }
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>(host, store_options(port, true, size, opts));
    port_ = store_->getPort();
  } catch (const std::exception& e) {
    std::string what = e.what();
    throw Error(ErrorKind::kDistributed, "rank 0: could not serve the rendezvous store on " + host + ":" +
                                             std::to_string(port) + ": " + what.substr(0, what.find('\n')));
  }
}

TcpServer::~TcpServer() = default;

int TcpServer::port() const {
  return port_;
}

std::unique_ptr<Group> TcpServer::join() {
  if (!store_) throw Error(ErrorKind::kInternal, "TcpServer::join called twice");
  auto store = std::move(store_);
  if (size_ == 1) return make_single_group();
  return make_group(store, 0, size_, opts_, gloo_hostname(host_), std::max(opts_.cuda_device, 0),
                    /*processes=*/true);
}

}  // namespace h3::dist
