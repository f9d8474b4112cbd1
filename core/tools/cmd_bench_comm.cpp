// `h3 bench comm`: latency and bandwidth of the engine's collectives
// (all_reduce, all_gather) through the public Group API, ranks as threads.
// The figures include what the engine pays per call: the metadata exchange
// that makes disagreements an agreed error, and the bounded wait.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/error.h"
#include "dist/world.h"
#include "engine/limits.h"
#include "tools/command.h"

namespace h3::tools {
namespace {

struct Row {
  int64_t bytes;
  int iters;
  double reduce_us;
  double gather_us;
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

int run(Args& args) {
  const int ranks = static_cast<int>(args.int_or("ranks", 2, 2, 16));
  const int64_t max_mib = args.int_or("max-mib", 64, 1, 1024);
  const std::string backend = args.string_or("backend", "gloo");
  args.finish();
  dist::WorldOptions opts;
  opts.timeout = kDefaultTimeout;
  if (backend == "nccl") {
    opts.backend = dist::Backend::kNccl;
  } else if (backend != "gloo") {
    throw UsageError{"--backend must be gloo or nccl, got '" + backend + "'"};
  }

  std::vector<int64_t> sizes;
  for (int64_t b = 1024; b <= (max_mib << 20); b *= 4) sizes.push_back(b);
  std::vector<Row> rows(sizes.size());

  auto results = dist::run_threads(
      ranks,
      [&](dist::Group& g) {
        const auto dev = g.device();
        for (size_t i = 0; i < sizes.size(); ++i) {
          const int64_t n = sizes[i] / 4;  // float32 elements
          const int iters = iterations_for(sizes[i]);
          at::Tensor x = at::ones({n}, at::TensorOptions().dtype(at::kFloat).device(dev));
          g.all_reduce(x);  // warm-up: connections, allocations
          g.barrier();
          auto t0 = std::chrono::steady_clock::now();
          for (int k = 0; k < iters; ++k) g.all_reduce(x);
          auto t1 = std::chrono::steady_clock::now();
          g.all_gather(x);
          g.barrier();
          auto t2 = std::chrono::steady_clock::now();
          for (int k = 0; k < iters; ++k) g.all_gather(x);
          auto t3 = std::chrono::steady_clock::now();
          if (g.rank() == 0) {
            rows[i] = Row{sizes[i], iters, std::chrono::duration<double, std::micro>(t1 - t0).count() / iters,
                          std::chrono::duration<double, std::micro>(t3 - t2).count() / iters};
          }
        }
      },
      opts);
  for (const auto& r : results) {
    if (!r.ok)
      throw Error(ErrorKind::kDistributed, "bench comm: rank " + std::to_string(r.rank) + ": " + r.error);
  }

  // algbw: bytes per rank / time. busbw: what each link carries, the usual
  // ring normalisation (all_reduce 2(n-1)/n, all_gather (n-1) * bytes / time).
  const double n = ranks;
  std::printf("bench comm: backend %s, %d ranks (threads), float32, times per call\n", backend.c_str(),
              ranks);
  std::printf("%9s %6s | %12s %10s %10s | %12s %10s %10s\n", "size", "iters", "all_reduce", "algbw", "busbw",
              "all_gather", "algbw", "busbw");
  std::printf("%9s %6s | %12s %10s %10s | %12s %10s %10s\n", "(per rank)", "", "us", "GB/s", "GB/s", "us",
              "GB/s", "GB/s");
  for (const auto& r : rows) {
    const double b = static_cast<double>(r.bytes);
    const double ar_alg = b / (r.reduce_us * 1e3);
    const double ag_alg = b / (r.gather_us * 1e3);
    std::printf("%9s %6d | %12.1f %10.3f %10.3f | %12.1f %10.3f %10.3f\n", human(r.bytes).c_str(), r.iters,
                r.reduce_us, ar_alg, ar_alg * 2 * (n - 1) / n, r.gather_us, ag_alg, ag_alg * (n - 1));
  }
  return 0;
}

H3_REGISTER_COMMAND("bench comm", "collective latency and bandwidth (all_reduce, all_gather)",
                    "usage: h3 bench comm [--ranks N] [--max-mib M] [--backend gloo|nccl]\n"
                    "  Times all_reduce and all_gather through the engine's Group API for\n"
                    "  1 KiB .. M MiB per rank (powers of 4), ranks as threads of this process.\n"
                    "  --ranks N     ranks (default 2, 2..16)\n"
                    "  --max-mib M   largest message in MiB (default 64)\n"
                    "  --backend B   gloo (CPU tensors, default) or nccl (one CUDA device per rank;\n"
                    "                only in builds with NCCL and a CUDA LibTorch)",
                    run);

}  // namespace
}  // namespace h3::tools
