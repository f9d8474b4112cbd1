// `h3 bench streams`: N endless causal streams at once on one engine (docs/engine.md, "Many
// streams"), on the tiny default model at its default size and on the medium random model: each
// stream's chunk period against real time (a chunk holds 17/24 s), the most streams held at real
// time, the peak resident set per added stream, fairness (the slowest stream's chunk rate over the
// fastest's), and the first frames of a stream admitted while the others play. Figures only;
// nothing asserts a time.

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dit/causal.h"
#include "dit/frames.h"
#include "dit/lora.h"
#include "dit/random_model.h"
#include "dit/transformer.h"
#include "engine/engine.h"
#include "engine/model/model.h"
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

// ---- Batching: are N streams' same-shape chunk forwards faster as one batch? ----

// One stream's state for the batching measure: its KV cache in a stream's steady state (sink 2,
// window 2: the text and three committed chunks) and its next chunk's noise forward.
struct BatchStream {
  std::unique_ptr<dit::KvCache> cache;
  dit::ChunkInputs next;
};

BatchStream batch_stream(const dit::Transformer& m, int64_t text_rows, int64_t lh, int64_t lw,
                         uint64_t seed) {
  const dit::DitConfig& c = m.config();
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto randn = [&](at::IntArrayRef shape) { return at::randn(shape, gen, at::kFloat); };
  BatchStream s;
  s.cache = std::make_unique<dit::KvCache>(c.num_layers, 2, 2);
  dit::prefill_text(m, randn({text_rows, c.text_dim}), at::Tensor(), *s.cache);
  const auto chunk = [&](int64_t k, float t) {
    dit::ChunkInputs in;
    in.span = dit::full_chunk(k);
    in.text_rows = text_rows;
    in.video = randn({1, c.in_channels, in.span.video_latents(), lh, lw});
    in.audio = randn({2 * in.span.audio_latents(), c.audio_in_channels});
    in.t_video = in.t_audio = t;
    return in;
  };
  for (int64_t k = 0; k < 3; ++k)
    dit::forward_chunk(m, chunk(k, dit::kCleanTimestep), *s.cache, dit::ChunkPass::kCommit);
  s.next = chunk(3, 0.5f);
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// N streams' next noise forwards one after another against one forward_chunks, at `threads`
// intra-op threads, alternating the two `reps` times (the median of each); and whether the
// batch gave each stream the velocities it gives alone, byte for byte (else the largest gap).
void batching_row(const char* name, const dit::Transformer& m, int64_t width, int64_t height, int n,
                  int threads, int reps) {
  at::set_num_threads(threads);
  const int64_t lh = height / dit::kVaeSpatialRatio, lw = width / dit::kVaeSpatialRatio;
  constexpr int64_t kTextRows = 64;
  std::vector<BatchStream> streams;
  std::vector<dit::ChunkInputs> ins;
  std::vector<dit::KvCache*> caches;
  for (int i = 0; i < n; ++i) {
    streams.push_back(batch_stream(m, kTextRows, lh, lw, 100 + static_cast<uint64_t>(i)));
    ins.push_back(streams.back().next);
    caches.push_back(streams.back().cache.get());
  }
  const auto apart = [&] {
    std::vector<dit::Velocity> v;
    for (int i = 0; i < n; ++i)
      v.push_back(dit::forward_chunk(m, ins[i], *caches[i], dit::ChunkPass::kNoise));
    return v;
  };
  const auto batch = [&] { return dit::forward_chunks(m, ins, caches, dit::ChunkPass::kNoise); };
  const std::vector<dit::Velocity> alone = apart(), together = batch();  // also the warm-up
  bool equal = true;
  double gap = 0;
  for (int i = 0; i < n; ++i) {
    for (const auto& [x, y] :
         {std::pair{alone[i].video, together[i].video}, std::pair{alone[i].audio, together[i].audio}}) {
      equal = equal && at::equal(x, y);
      gap = std::max(gap, (x - y).abs().max().item<double>());
    }
  }
  std::vector<double> t_apart, t_batch;
  for (int r = 0; r < reps; ++r) {
    auto t0 = BenchClock::now();
    apart();
    t_apart.push_back(seconds_since(t0));
    t0 = BenchClock::now();
    batch();
    t_batch.push_back(seconds_since(t0));
  }
  const double a = median(t_apart), b = median(t_batch);
  const int64_t rows = ins[0].span.rows(lh / m.config().patch[1], lw / m.config().patch[2]);
  std::printf("%-7s %9s %5lld %3d %7d %11.1f %11.1f %+8.1f%% %s\n", name,
              (std::to_string(width) + "x" + std::to_string(height)).c_str(), (long long)rows, n, threads,
              1e3 * a, 1e3 * b, 100.0 * (a - b) / a,
              equal ? "yes" : ("no (max |dv| " + std::to_string(gap) + ")").c_str());
  std::fflush(stdout);
}

std::string first_line_of(const std::string& path, const std::string& prefix) {
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return "";
}

// The CPU's model name and its AVX-512 / bf16 / AMX flags, and the load average now.
void print_machine() {
  const std::string model = first_line_of("/proc/cpuinfo", "model name");
  const std::string flags = " " + first_line_of("/proc/cpuinfo", "flags") + " ";
  std::string has;
  for (const char* f : {"avx512f", "avx512_bf16", "amx_bf16"}) {
    if (flags.find(std::string(" ") + f + " ") != std::string::npos)
      has += std::string(has.empty() ? "" : ", ") + f;
  }
  std::printf("cpu: %s (%s; %u CPUs); load average: %s\n",
              model.empty() ? "unknown" : model.substr(model.find(':') + 2).c_str(),
              has.empty() ? "no avx512f, avx512_bf16 or amx_bf16" : has.c_str(),
              std::thread::hardware_concurrency(), first_line_of("/proc/loadavg", "").c_str());
}

void run_batching(const std::string& scratch) {
  print_machine();
  std::printf(
      "h3 bench streams --batching: N streams' next causal chunk forwards (noise, t = 0.5; each stream's\n"
      "KV cache holds the text, 64 rows, and 3 chunks: sink 2, window 2; fp32, a random LoRA) one after\n"
      "another (forward_chunk) against one batch (forward_chunks), median of the reps, alternated\n");
  std::printf("%-7s %9s %5s %3s %7s %11s %11s %9s %s\n", "model", "size", "rows", "N", "threads", "apart_ms",
              "batch_ms", "saved", "same bytes");
  for (BenchModel which : {BenchModel::kTiny, BenchModel::kMedium}) {
    std::string name, model_dir, lora;
    int64_t width = 0, height = 0;
    {
      // The streams' model, size and LoRA; the engine itself is not needed here.
      const BenchSetup b = open_bench_model(which, scratch);
      name = b.name;
      model_dir = b.model_dir;
      lora = b.lora;
      width = b.width;
      height = b.height;
    }
    dit::Transformer m = dit::Transformer::load(read_model(model_dir).transformer_dir);
    m.attach_lora(lora);
    for (int n : {2, 4}) {
      for (int threads : {1, 2}) {
        batching_row(name.c_str(), m, width, height, n, threads, which == BenchModel::kTiny ? 20 : 5);
      }
    }
  }
  print_machine();
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
    run_batching(scratch.path());
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
    "--batching instead times N = 2 and 4 streams' next causal chunk forwards through the real DiT\n"
    "one after another against one batch (each stream attending its own KV cache), on both models\n"
    "at 1 and 2 threads, says whether the batch gives each stream the bytes it gives alone, and\n"
    "prints the CPU model and the load average beside the figures.\n",
    run);

}  // namespace h3::tools
