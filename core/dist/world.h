// Starting ranks: as threads of this process (the GStreamer element's form),
// or as processes/hosts that meet at a TCP rendezvous store.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/group.h"

namespace c10d {
class Store;
class TCPStore;
}  // namespace c10d

namespace h3::dist {

enum class Backend {
  kGloo,  // CPU tensors, through c10d::ProcessGroupGloo
  kNccl,  // CUDA tensors; only in builds with NCCL and a CUDA LibTorch (has_nccl())
};

// How the thread ranks of run_threads move CPU tensors between them.
enum class ThreadTransport {
  kSharedMemory,  // straight copies between the ranks' buffers, at memory speed (dist/memory_group.h)
  kGloo,          // Gloo over loopback TCP, as ranks in separate processes use (for comparison)
};

struct WorldOptions {
  // Bound on every collective and on connecting the ranks.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  Backend backend = Backend::kGloo;
  // NCCL only: this rank's CUDA device. -1: run_threads uses cuda:<rank>,
  // join_tcp uses cuda:0 (set it when several processes share a host).
  int cuda_device = -1;
  // run_threads with kGloo only: the thread ranks' transport.
  ThreadTransport thread_transport = ThreadTransport::kSharedMemory;
};

// Whether this build has the NCCL backend.
bool has_nccl();

struct RankResult {
  int rank;
  bool ok;
  std::string error;             // what() of the rank's exception; empty when ok
  std::exception_ptr exception;  // the exception itself, for rethrowing; null when ok
};

// For callers that need every rank to have succeeded: rethrows the first failed rank's own
// exception (or h3::Error(kDistributed) naming it when none was kept); returns when all succeeded.
void rethrow_first_failure(const std::vector<RankResult>& results);

// Starts `size` ranks as threads, each with its own Group (CPU: shared memory, or Gloo over a
// private store; NCCL over a private store; concurrent worlds never collide), runs fn, joins all and returns
// every rank's outcome in rank order (never throws for a rank's failure).
// When fn throws on a rank, that rank reports the failure to its group before
// its group closes, so peers waiting in a collective end within a moment with
// "rank R failed: <message>". size 1 runs fn on make_single_group().
// Throws h3::Error(kInvalidArgument) for size < 1.
std::vector<RankResult> run_threads(int size, const std::function<void(Group&)>& fn,
                                    const WorldOptions& opts = {});

// A rank of a multi-process world joins through a TCPStore at host:port; rank
// 0 serves the store there (port must then be fixed and free). Returns once
// all `size` ranks have joined, or throws h3::Error(kDistributed) after the
// timeout. A process whose work fails should call Group::report_failure
// before it gives up, so that its peers do not wait for the timeout.
std::unique_ptr<Group> join_tcp(const std::string& host, int port, int size, int rank,
                                const WorldOptions& opts = {});

// One rank's group of `size` over a store every rank shares (the door's sealed view of a
// process world, admission/door.h): Gloo binds its listener to `gloo_host` (empty: the host's
// default interface); NCCL uses opts.cuda_device (-1: cuda:0). Throws h3::Error(kDistributed)
// when the ranks do not connect within opts.timeout.
std::unique_ptr<Group> make_store_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                        const WorldOptions& opts, const std::string& gloo_host);

// Rank 0's side of a TCP world on a port the system chooses (port 0): serve
// first, hand port() to the other ranks (which call join_tcp), then join().
class TcpServer {
 public:
  TcpServer(const std::string& host, int port, int size, const WorldOptions& opts = {});
  ~TcpServer();
  TcpServer(const TcpServer&) = delete;
  TcpServer& operator=(const TcpServer&) = delete;

  int port() const;
  // Rank 0's group; call once.
  std::unique_ptr<Group> join();

 private:
  std::string host_;
  int size_;
  int port_ = 0;
  WorldOptions opts_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
};

}  // namespace h3::dist
