// `h3 bench comm`: latency and bandwidth of the engine's collectives (all_reduce, all_gather,
// broadcast) through the public Group API, with the ranks as threads of this process and as
// processes (children of this command meeting at a loopback TCPStore), side by side.
// The figures include what the engine pays per call: the metadata exchange that makes
// disagreements an agreed error, and the bounded wait.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "dist/world.h"
#include "engine/process/rank_threads.h"
#include "h3/error.h"
#include "h3/limits.h"
#include "tools/command.h"

namespace h3::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct Row {
  int64_t bytes = 0;
  int iters = 0;
  double reduce_us = 0, gather_us = 0, bcast_us = 0;
};

std::string human(int64_t bytes) {
  if (bytes >= (1 << 20)) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

// Fewer iterations for large messages keep the whole run within about a
// minute on a small, busy CPU machine; every rank runs the same schedule.
int iterations_for(int64_t bytes) {
  return static_cast<int>(std::clamp<int64_t>((int64_t{32} << 20) / bytes, 2, 50));
}

double us_per_call(Clock::time_point t0, Clock::time_point t1, int iters) {
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / iters;
}

// Every rank: the whole schedule; rank 0 keeps the rows.
void bench(dist::Group& g, const std::vector<int64_t>& sizes, std::vector<Row>& rows) {
  const auto dev = g.device();
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i] / 4;  // float32 elements
    const int iters = iterations_for(sizes[i]);
    at::Tensor x = at::ones({n}, at::TensorOptions().dtype(at::kFloat).device(dev));
    Row r{sizes[i], iters};
    g.all_reduce(x);  // warm-up: connections, allocations
    g.barrier();
    auto t0 = Clock::now();
    for (int k = 0; k < iters; ++k) g.all_reduce(x);
    r.reduce_us = us_per_call(t0, Clock::now(), iters);
    g.all_gather(x);
    g.barrier();
    t0 = Clock::now();
    for (int k = 0; k < iters; ++k) g.all_gather(x);
    r.gather_us = us_per_call(t0, Clock::now(), iters);
    g.broadcast(x, 0);
    g.barrier();
    t0 = Clock::now();
    for (int k = 0; k < iters; ++k) g.broadcast(x, 0);
    r.bcast_us = us_per_call(t0, Clock::now(), iters);
    if (g.rank() == 0) rows[i] = r;
  }
}

// algbw: bytes per rank / time. busbw: what each link carries, the usual ring normalisation
// (all_reduce 2(n-1)/n, all_gather (n-1) * bytes / time, broadcast bytes / time).
void print(const char* what, const std::string& backend, int ranks, const std::vector<Row>& rows) {
  const double n = ranks;
  std::printf("\nbench comm: backend %s, %d ranks as %s, float32, time per call\n", backend.c_str(), ranks,
              what);
  std::printf("%9s %5s | %10s %8s | %10s %8s | %10s %8s\n", "size", "iters", "all_reduce", "busbw",
              "all_gather", "busbw", "broadcast", "algbw");
  std::printf("%9s %5s | %10s %8s | %10s %8s | %10s %8s\n", "(per rank)", "", "us", "GB/s", "us", "GB/s",
              "us", "GB/s");
  for (const auto& r : rows) {
    const double b = static_cast<double>(r.bytes);
    std::printf("%9s %5d | %10.1f %8.3f | %10.1f %8.3f | %10.1f %8.3f\n", human(r.bytes).c_str(), r.iters,
                r.reduce_us, b / (r.reduce_us * 1e3) * 2 * (n - 1) / n, r.gather_us,
                b / (r.gather_us * 1e3) * (n - 1), r.bcast_us, b / (r.bcast_us * 1e3));
  }
  std::fflush(stdout);
}

// Process ranks 1..N-1: this binary again, as `h3 bench comm --peer-port P --peer-rank R`.
std::vector<pid_t> spawn_peers(int ranks, int port, int64_t max_mib) {
  std::vector<pid_t> pids;
  for (int r = 1; r < ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      std::vector<std::string> args{"h3",
                                    "bench",
                                    "comm",
                                    "--ranks",
                                    std::to_string(ranks),
                                    "--max-mib",
                                    std::to_string(max_mib),
                                    "--peer-port",
                                    std::to_string(port),
                                    "--peer-rank",
                                    std::to_string(r)};
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv("/proc/self/exe", argv.data());
      _exit(127);
    }
    if (pid < 0) throw Error(ErrorKind::kInternal, "bench comm: fork failed");
    pids.push_back(pid);
  }
  return pids;
}

int run(Args& args) {
  const int ranks = static_cast<int>(args.int_or("ranks", 2, 2, 16));
  const int64_t max_mib = args.int_or("max-mib", 64, 1, 1024);
  const std::string backend = args.string_or("backend", "gloo");
  const std::string mode = args.string_or("ranks-as", "both");
  const std::string transport = args.string_or("thread-transport", "both");
  const int peer_port = static_cast<int>(args.int_or("peer-port", 0, 0, 65535));
  const int peer_rank = static_cast<int>(args.int_or("peer-rank", 0, 0, 15));
  args.finish();
  dist::WorldOptions opts;
  opts.timeout = kDefaultTimeout;
  if (backend == "nccl") {
    opts.backend = dist::Backend::kNccl;
  } else if (backend != "gloo") {
    throw UsageError{"--backend must be gloo or nccl, got '" + backend + "'"};
  }
  if (mode != "both" && mode != "threads" && mode != "processes") {
    throw UsageError{"--ranks-as must be threads, processes or both, got '" + mode + "'"};
  }
  if (transport != "both" && transport != "memory" && transport != "gloo") {
    throw UsageError{"--thread-transport must be memory, gloo or both, got '" + transport + "'"};
  }

  std::vector<int64_t> sizes;
  for (int64_t b = 1024; b <= (max_mib << 20); b *= 4) sizes.push_back(b);
  std::vector<Row> rows(sizes.size());

  // Process ranks on this host take their share of its cores, as a process world's ranks do
  // (engine/process/rank_threads.h): more would have OpenMP's spinning pools take the cores the
  // peers need in every collective.
  const int process_threads = engine_detail::threads_per_rank(engine_detail::usable_cores().count(), ranks);
  if (peer_port != 0) {  // a process rank started by rank 0 below
    at::set_num_threads(process_threads);
    opts.cuda_device = peer_rank;
    auto g = dist::join_tcp("127.0.0.1", peer_port, ranks, peer_rank, opts);
    bench(*g, sizes, rows);
    return 0;
  }
  if (mode != "processes") {
    // NCCL thread ranks have one transport; CPU thread ranks share memory unless Gloo is asked.
    for (const std::string t : {"memory", "gloo"}) {
      if (backend == "nccl" && t == "gloo") continue;
      if (backend != "nccl" && transport != "both" && transport != t) continue;
      dist::WorldOptions thread_opts = opts;
      thread_opts.thread_transport =
          t == "memory" ? dist::ThreadTransport::kSharedMemory : dist::ThreadTransport::kGloo;
      dist::rethrow_first_failure(dist::run_threads(
          ranks, [&](dist::Group& g) { bench(g, sizes, rows); }, thread_opts));
      print(backend == "nccl" ? "threads"
            : t == "memory"   ? "threads (shared memory)"
                              : "threads (Gloo, loopback TCP)",
            backend == "nccl" ? backend : t, ranks, rows);
    }
  }
  if (mode != "threads") {
    at::set_num_threads(process_threads);
    opts.cuda_device = 0;
    dist::TcpServer server("127.0.0.1", 0, ranks, opts);
    const std::vector<pid_t> pids = spawn_peers(ranks, server.port(), max_mib);
    std::string failed;
    try {
      auto g = server.join();
      bench(*g, sizes, rows);
    } catch (const std::exception& e) {
      failed = e.what();
      for (pid_t p : pids) kill(p, SIGKILL);
    }
    for (size_t i = 0; i < pids.size(); ++i) {
      int st = 0;
      waitpid(pids[i], &st, 0);
      if (failed.empty() && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        failed = "process rank " + std::to_string(i + 1) + " did not exit 0";
      }
    }
    if (!failed.empty()) throw Error(ErrorKind::kDistributed, "bench comm (processes): " + failed);
    print(("processes (one host: shared memory unless H3_DIST_SHM=0, else loopback TCP; " +
           std::to_string(process_threads) + " intra-op thread(s) each)")
              .c_str(),
          backend, ranks, rows);
  }
  return 0;
}

H3_REGISTER_COMMAND("bench comm", "collective latency and bandwidth, thread ranks and process ranks",
                    "usage: h3 bench comm [--ranks N] [--max-mib M] [--backend gloo|nccl]\n"
                    "                     [--ranks-as threads|processes|both]\n"
                    "                     [--thread-transport memory|gloo|both]\n"
                    "  Times all_reduce, all_gather and broadcast through the engine's Group API\n"
                    "  for 1 KiB .. M MiB per rank (powers of 4), with the ranks as threads of this\n"
                    "  process and as processes (this command started again, meeting at a\n"
                    "  loopback TCPStore), one table each.\n"
                    "  --ranks N     ranks (default 2, 2..16)\n"
                    "  --max-mib M   largest message in MiB (default 64)\n"
                    "  --backend B   gloo (CPU tensors, default) or nccl (one CUDA device per rank;\n"
                    "                only in builds with NCCL and a CUDA LibTorch)\n"
                    "  --ranks-as    threads, processes or both (default)\n"
                    "  --thread-transport  CPU thread ranks: shared memory (the engine's), Gloo over\n"
                    "                loopback TCP (as processes use), or both (default)",
                    run);

}  // namespace
}  // namespace h3::tools
