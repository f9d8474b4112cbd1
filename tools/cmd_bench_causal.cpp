// `h3 bench causal`: the chunk-causal sampler (docs/causal.md) against the ordinary one on the
// medium random model with a random LoRA: time to the first frame, the period between chunks
// and the total, for the same frames (4 causal forwards per chunk against 20 Euler steps over
// the whole clip); peak RSS of causal clips 2x, 4x and 8x as long (flat: the KV cache holds at
// most sink + window records, and each chunk's latents leave once decoded); the KV cache's bytes
// per chunk. Figures only; nothing asserts a time.

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "dit/consistency_sampler.h"
#include "dit/frames.h"
#include "engine/engine.h"
#include "tools/bench_fixture.h"
#include "tools/command.h"
#include "tools/process_memory.h"
#include "tools/scratch_dir.h"

namespace h3::tools {
namespace {

struct Run {
  std::vector<double> arrivals;
  double total_s = 0, period_s = 0, peak_mib = 0;
  int64_t frames = 0, evaluations = 0;
};

Run timed(Engine& e, const GenerationRequest& r) {
  reset_peak_rss();
  const ClipPlan plan = e.plan(r);
  const auto t0 = BenchClock::now();
  ArrivalSink sink(t0);
  StreamControl control;
  e.generate(r, sink, {}, control);
  Run out;
  out.total_s = seconds_since(t0);
  out.arrivals = sink.arrivals;
  out.period_s = sink.mean_period();
  out.frames = sink.frames;
  out.evaluations = plan.evaluations;
  out.peak_mib = status_mib("VmHWM:");
  return out;
}

int run(Args& a) {
  const std::string tmp_base = a.string_or("dir", std::filesystem::temp_directory_path().string());
  const int ranks = static_cast<int>(a.int_or("ranks", 1, 1, 8));
  const int64_t base_chunks = a.int_or("chunks", 4, 1, 16);
  a.finish();
  const ScratchDir scratch(tmp_base, "h3-bench-causal-");
  const BenchSetup medium = open_bench_model(BenchModel::kMedium, scratch.path(), ranks);
  Engine* engine = medium.engine.get();
  const dit::DitConfig& spec = engine->model().dit;
  GenerationRequest r = medium.request("a benchmark", 1);
  const int64_t frames = dit::clip_frames(base_chunks);
  r.num_frames = frames;

  std::printf("h3 bench causal (CPU, fp32, %d rank(s); medium random model 320x192, random LoRA r 16)\n",
              ranks);
  std::printf("%-22s %6s %5s %9s %9s %8s %9s\n", "sampler", "frames", "evals", "1st_frame", "period_s",
              "total_s", "peak_MiB");
  GenerationRequest euler = r;
  euler.sampler = Sampler::kEuler;
  euler.steps = 21;  // 20 evaluations
  GenerationRequest causal = r;
  causal.sampler = Sampler::kCausal;
  // Warm-up: the first generation of an engine pays for allocator and kernel warm-up.
  timed(*engine, causal);
  for (const auto& [name, req] : {std::pair<const char*, GenerationRequest>{"euler (20 steps)", euler},
                                  {"causal (4 per chunk)", causal}}) {
    const Run x = timed(*engine, req);
    std::printf("%-22s %6lld %5lld %9.3f %9.3f %8.3f %9.1f\n", name, (long long)x.frames,
                (long long)x.evaluations, x.arrivals.front(), x.period_s, x.total_s, x.peak_mib);
    std::fflush(stdout);
  }

  std::printf("\ncausal peak RSS against the clip's length (sink 2, window 2)\n");
  std::printf("%-8s %6s %7s %9s %9s %8s\n", "length", "frames", "chunks", "1st_frame", "total_s", "peak_MiB");
  for (int64_t x : {1, 2, 4, 8}) {
    GenerationRequest req = causal;
    req.num_frames = std::min<int64_t>(kMaxFrames, dit::clip_frames(base_chunks * x));
    const Run run = timed(*engine, req);
    std::printf("%-8s %6lld %7lld %9.3f %9.3f %8.1f\n", (std::to_string(x) + "x").c_str(),
                (long long)run.frames, (long long)(run.evaluations / 4), run.arrivals.front(), run.total_s,
                run.peak_mib);
    std::fflush(stdout);
  }

  // The KV cache as the sampler fills it: bytes after each chunk (one rank's heads).
  dit::Transformer dit = dit::Transformer::load(medium.model_dir + "/transformer");
  dit.attach_lora(medium.lora);
  dit::CausalRequest cr;
  cr.text = at::randn({24, spec.text_dim});
  cr.video_latents = 5 * 8 + 2;
  cr.latent_h = 192 / 16;
  cr.latent_w = 320 / 16;
  cr.audio_latents = dit::audio_latents_for(dit::clip_frames(8));
  dit::CausalSampler s(dit, cr);
  std::printf("\nKV cache (sink 2, window 2; text 24 rows; %lld layers x %lld heads x %lld, fp32)\n",
              (long long)spec.num_layers, (long long)spec.num_heads, (long long)spec.head_dim);
  std::printf("%-14s %7s %6s %9s\n", "after chunk", "records", "rows", "MiB");
  std::printf("%-14s %7zu %6lld %9.2f\n", "prefill", s.cache().records().size(), (long long)s.cache().rows(),
              s.cache().bytes() / 1048576.0);
  while (!s.done()) {
    const auto c = s.next();
    std::printf("%-14lld %7zu %6lld %9.2f\n", (long long)c.span.index, s.cache().records().size(),
                (long long)s.cache().rows(), s.cache().bytes() / 1048576.0);
  }
  std::printf(
      "\n1st_frame: from generate() to the first frames at the sink; period_s: mean time between\n"
      "chunks after the first; peak_MiB: the process's peak RSS during that generation (the\n"
      "weights included). A chunk's record enters the cache at the next chunk's start (its clean\n"
      "forward), so the table shows each chunk's cache as the next chunk reads it.\n");
  return 0;
}

}  // namespace

H3_REGISTER_COMMAND(
    "bench causal", "the chunk-causal sampler: first frame, chunk period, flat memory, KV-cache bytes",
    "usage: h3 bench causal [--ranks R] [--chunks K] [--dir DIR]\n"
    "\n"
    "Writes a medium random model and a random LoRA (rank 16) to a temp folder under DIR (default\n"
    "$TMPDIR or /tmp, deleted after), then at 320x192: a clip of 17 K + 5 frames (K = 4) with the\n"
    "euler sampler (20 evaluations) and with the causal one (4 forwards per chunk), time to the\n"
    "first frames, the period between chunks, the total and the peak RSS; causal clips of 1x, 2x,\n"
    "4x and 8x that length and their peak RSS; the KV cache's records, rows and bytes chunk by\n"
    "chunk.\n"
    "\n"
    "  --ranks R    ranks as threads (default 1)\n"
    "  --chunks K   the base clip's full chunks (default 4)\n",
    run);

}  // namespace h3::tools
