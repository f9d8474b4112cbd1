// `h3 bench streams`: N endless causal streams at once on one engine (docs/engine.md, "Many
// streams"), on the tiny default model at its default size and on the medium random model: each
// stream's chunk period against real time (a chunk holds 17/24 s), the most streams held at real
// time, the peak resident set per added stream, fairness (the slowest stream's chunk rate over the
// fastest's), and the first frames of a stream admitted while the others play. Figures only;
// nothing asserts a time.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dit/random_model.h"
#include "engine/engine.h"
#include "engine/model/model.h"
#include "engine/planning/memory_guard.h"
#include "engine/planning/plan.h"
#include "tools/bench_fixture.h"
#include "tools/command.h"
#include "tools/process_memory.h"
#include "tools/scratch_dir.h"
#include "tools/tiny_model.h"

namespace h3::tools {
namespace {

constexpr double kChunkSeconds = 17.0 / 24.0;

// One stream: its chunks' arrival times (from its own start), finished after `chunks` chunks.
struct Stream {
  std::vector<double> arrivals;
  std::string error;
  double period = 0;  // the median time between two chunks after the first
};

// Counts every stream's chunks so that the late stream starts once the others are under way.
struct Progress {
  std::mutex m;
  std::condition_variable cv;
  int64_t chunks = 0;
};

void run_one(Engine& e, GenerationRequest r, int64_t chunks, Stream& s, Progress& all) {
  StreamControl control;
  ArrivalSink sink(BenchClock::now(), &control, chunks);
  sink.on_arrival = [&all] {
    {
      std::lock_guard<std::mutex> lk(all.m);
      ++all.chunks;
    }
    all.cv.notify_all();
  };
  try {
    e.generate(r, sink, {}, control);
  } catch (const std::exception& x) {
    s.error = x.what();
  }
  s.arrivals = sink.arrivals;
  s.period = sink.median_period();
}

// N streams of different seeds and prompts, N - 1 started together and the last once they gave
// two chunks each (its first frames are those of a stream admitted while the others play).
// Returns the slowest stream's period (0 when a stream failed).
double run_streams(const char* model, Engine& e, const GenerationRequest& base, int n, int64_t chunks,
                   double rss_one, double* rss_n) {
  std::vector<Stream> streams(static_cast<size_t>(n));
  Progress all;
  reset_peak_rss();
  const auto t0 = BenchClock::now();
  std::vector<std::thread> threads;
  const auto start = [&](int i) {
    GenerationRequest r = base;
    r.seed = static_cast<uint64_t>(100 + i);
    r.prompt = base.prompt + " " + std::to_string(i);
    threads.emplace_back([&, r, i] { run_one(e, r, chunks, streams[static_cast<size_t>(i)], all); });
  };
  for (int i = 0; i + 1 < n; ++i) start(i);
  if (n > 1) {
    std::unique_lock<std::mutex> lk(all.m);
    all.cv.wait(lk, [&] { return all.chunks >= 2 * static_cast<int64_t>(n - 1); });
  }
  start(n - 1);
  for (auto& t : threads) t.join();
  const double wall = seconds_since(t0);
  double slowest = 0, fastest = 1e30, periods = 0;
  int64_t delivered = 0;
  for (const Stream& s : streams) {
    if (!s.error.empty()) {
      std::printf("%-7s N=%d: a stream failed: %s\n", model, n, s.error.c_str());
      return 0;
    }
    slowest = std::max(slowest, s.period);
    fastest = std::min(fastest, s.period);
    periods += s.period;
    delivered += static_cast<int64_t>(s.arrivals.size());
  }
  const double peak = status_mib("VmHWM:");
  *rss_n = peak;
  const Stream& late = streams.back();
  std::printf(
      "%-7s %3d %9.3f %9.3f %7.2fx %7.3f %9.3f %9.2f %9.1f %10s\n", model, n, periods / n, slowest,
      kChunkSeconds / slowest, fastest / slowest, late.arrivals.front(),
      static_cast<double>(delivered) / wall, peak,
      n > 1 ? (std::to_string(static_cast<int>((peak - rss_one) / (n - 1) + 0.5)) + " MiB").c_str() : "-");
  std::fflush(stdout);
  return slowest;
}

// ---- Batching: would two streams' same-shape forwards be faster as one batch? ----

// One DiT block's GEMMs on `rows` rows ([rows, in] x [in, out], fp32): q, k, v, the output
// projection and the SwiGLU FFN's gate, up and down. What batching two streams' chunk forwards
// would merge (their attention reads different KV caches and stays apart).
struct Gemm {
  int64_t in, out;
};
std::vector<Gemm> block_gemms(const dit::DitConfig& c) {
  const int64_t h = c.hidden_size, i = c.inner_dim(), f = c.ffn_dim;
  return {{h, i}, {h, i}, {h, i}, {i, h}, {h, f}, {h, f}, {f, h}};
}

// The best of `reps` timings of the block's GEMMs done as `calls` separate products of `rows`
// rows each (two streams) or one product of calls * rows rows (one batch).
double gemm_seconds(const std::vector<Gemm>& gemms, int64_t rows, int calls, bool batched, int reps) {
  std::vector<at::Tensor> w, x;
  for (const Gemm& g : gemms) {
    w.push_back(at::randn({g.out, g.in}) * 0.02);
    x.push_back(at::randn({batched ? calls * rows : rows, g.in}));
  }
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = BenchClock::now();
    for (size_t k = 0; k < gemms.size(); ++k) {
      for (int c = 0; c < (batched ? 1 : calls); ++c) at::linear(x[k], w[k]);
    }
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

void batching_row(const char* name, const dit::DitConfig& c, int64_t rows) {
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    const std::vector<Gemm> g = block_gemms(c);
    gemm_seconds(g, rows, 2, false, 3);  // warm-up
    const double apart = gemm_seconds(g, rows, 2, false, 30);
    const double batch = gemm_seconds(g, rows, 2, true, 30);
    std::printf("%-7s %6lld %7lld %7d %11.3f %11.3f %+9.1f%%\n", name, (long long)c.hidden_size,
                (long long)rows, threads, 1e3 * apart, 1e3 * batch, 100.0 * (apart - batch) / apart);
  }
}

int64_t chunk_rows(const ModelInfo& m, int64_t width, int64_t height) {
  GenerationRequest r;
  r.sampler = Sampler::kCausal;
  r.num_frames = kEndless;
  r.width = width;
  r.height = height;
  return widest_causal_chunk_rows(m.dit, make_plan(m, r));
}

std::vector<int> parse_counts(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    const int n = std::stoi(item);
    if (n < 1 || n > 64)
      throw Error(ErrorKind::kInvalidArgument, "--counts: each count must be within 1..64");
    out.push_back(n);
  }
  if (out.empty()) throw Error(ErrorKind::kInvalidArgument, "--counts: give at least one count");
  return out;
}

void run_model(const char* name, Engine& e, const GenerationRequest& r, const std::vector<int>& counts,
               int64_t chunks) {
  double rss_one = 0;
  int held = 0;
  for (int n : counts) {
    double rss = 0;
    const double slowest = run_streams(name, e, r, n, chunks, rss_one, &rss);
    if (n == 1) rss_one = rss;
    if (slowest > 0 && slowest <= kChunkSeconds) held = std::max(held, n);
  }
  std::printf("%-7s the most streams held at real time (of those run): %d\n", name, held);
}

int run(Args& a) {
  const std::string tmp_base = a.string_or("dir", std::filesystem::temp_directory_path().string());
  const int64_t chunks = a.int_or("chunks", 12, 4, 100000);
  const std::vector<int> counts = parse_counts(a.string_or("counts", "1,2,4,8"));
  const bool tiny_only = a.flag("tiny-only");
  const bool batching = a.flag("batching");
  a.finish();
  const ScratchDir scratch(tmp_base, "h3-bench-streams-");
  if (batching) {
    const std::string medium = scratch.path() + "/medium";
    write_random_model(medium, medium_spec(), 11);
    const ModelInfo tiny = read_model(default_model_dir()), med = read_model(medium);
    std::printf(
        "h3 bench streams --batching: one DiT block's GEMMs (q, k, v, out, FFN gate, up, down; fp32) for "
        "two\n"
        "streams' causal chunks, as two products of M rows against one batch of 2M rows (best of 30)\n");
    std::printf("%-7s %6s %7s %7s %11s %11s %10s\n", "model", "hidden", "M_rows", "threads", "2xM_ms",
                "1x2M_ms", "saved");
    batching_row("tiny", tiny.dit, chunk_rows(tiny, 256, 160));
    batching_row("medium", med.dit, chunk_rows(med, 320, 192));
    return 0;
  }
  std::printf(
      "h3 bench streams (CPU, fp32, 1 rank, one engine; N endless causal streams, 4 forwards per chunk,\n"
      "sink 2, window 2, a random LoRA, each finished after %lld chunks; the last admitted once the others\n"
      "gave 2 chunks each)\n",
      (long long)chunks);
  std::printf("%-7s %3s %9s %9s %8s %7s %9s %9s %9s %10s\n", "model", "N", "period_s", "slowest_s",
              "realtime", "fair", "join_1st", "chunks/s", "peak_MiB", "per_stream");
  for (BenchModel which : {BenchModel::kTiny, BenchModel::kMedium}) {
    if (tiny_only && which != BenchModel::kTiny) continue;
    const BenchSetup m = open_bench_model(which, scratch.path());
    GenerationRequest r = m.request("a benchmark stream", 0);
    r.sampler = Sampler::kCausal;
    r.num_frames = kEndless;
    run_model(m.name, *m.engine, r, counts, chunks);
  }
  std::printf(
      "\nperiod_s: the streams' median time between two chunks, averaged over the streams; slowest_s: the\n"
      "slowest stream's; realtime: 17/24 s over slowest_s (1x or more: every stream holds real time);\n"
      "fair: the slowest stream's chunk rate over the fastest's (1.0: equal); join_1st: the first frames\n"
      "of the stream admitted while the others played, from its generate(); chunks/s: every stream's\n"
      "chunks over the wall time; peak_MiB: the run's peak resident set (the shared weights included);\n"
      "per_stream: what each stream beyond the first added to it.\n");
  return 0;
}

}  // namespace

H3_REGISTER_COMMAND(
    "bench streams", "N endless causal streams on one engine: period, real time, fairness, memory",
    "usage: h3 bench streams [--counts 1,2,4,8] [--chunks N] [--tiny-only] [--batching] [--dir DIR]\n"
    "\n"
    "Runs N concurrent endless causal streams (a random LoRA) on one engine, for each N of --counts,\n"
    "on the tiny default model at 256x160 and on a medium random model (written to a temp folder\n"
    "under DIR, deleted after) at 320x192; each stream is finished after --chunks chunks (default\n"
    "12). Prints each N's chunk periods against real time, fairness, the first frames of a stream\n"
    "admitted while the others play, the peak resident set and what each added stream adds to it.\n"
    "--batching instead times one DiT block's GEMMs for two streams' chunks as two products against\n"
    "one batch, on both models' chunk shapes, at 1 and 2 threads.\n",
    run);

}  // namespace h3::tools
