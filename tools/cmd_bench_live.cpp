// `h3 bench live`: an endless causal stream (docs/causal.md "Live") on the tiny default model and
// on the medium random model with a random LoRA: time to the first frames, the period between
// chunks, the resident set after 10 chunks and after 100 (flat: the KV cache holds the prompt,
// the sink and the window; each chunk's latents leave once decoded), and a prompt change's cost
// (its chunk's period against the others'). Figures only; nothing asserts a time.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "h3/model_clock.h"
#include "tools/bench_fixture.h"
#include "tools/command.h"
#include "tools/process_memory.h"
#include "tools/scratch_dir.h"

namespace h3::tools {
namespace {

void run_stream(const char* name, Engine& e, GenerationRequest r, int64_t chunks) {
  r.num_frames = kEndless;
  r.sampler = Sampler::kCausal;
  // A prompt change half way: its chunk re-encodes the prompt and prefills it again.
  r.prompt_timeline = {{dit::chunk_start_seconds(chunks / 2), "the same scene at night"}};
  StreamControl control;
  reset_peak_rss();
  ArrivalSink sink(BenchClock::now(), &control, chunks, /*sample_rss=*/true);
  e.generate(r, sink, {}, control);
  const auto& a = sink.arrivals;
  std::vector<double> periods;
  for (size_t i = 1; i < a.size(); ++i) periods.push_back(a[i] - a[i - 1]);
  std::vector<double> sorted = periods;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  // The chunk that follows the change: the frames of chunk c leave once chunk c + 1 is made.
  const size_t changed = static_cast<size_t>(chunks / 2) - 1;
  const double change = changed < periods.size() ? periods[changed] : 0;
  const double early = sink.rss_over(10), late = sink.rss_over(sink.rss.size() - 10);
  std::printf("%-8s %7lld %9.3f %9.3f %9.3f %9.3f %8.1f %8.1f %+7.2f%% %8.1f\n", name, (long long)a.size(),
              a.front(), median, sorted.empty() ? 0 : sorted.back(), change, early, late,
              early > 0 ? 100.0 * (late - early) / early : 0.0, status_mib("VmHWM:"));
  std::fflush(stdout);
}

int run(Args& a) {
  const std::string tmp_base = a.string_or("dir", std::filesystem::temp_directory_path().string());
  const int64_t chunks = a.int_or("chunks", 100, 12, 100000);
  const bool tiny_only = a.flag("tiny-only");
  a.finish();
  const ScratchDir scratch(tmp_base, "h3-bench-live-");
  std::printf(
      "h3 bench live (CPU, fp32, 1 rank; endless causal streams finished after %lld chunks, 4 forwards\n"
      "per chunk, sink 2, window 2; a prompt change at chunk %lld)\n",
      (long long)chunks, (long long)(chunks / 2));
  std::printf("%-8s %7s %9s %9s %9s %9s %8s %8s %8s %8s\n", "model", "chunks", "1st_frame", "period_s",
              "max_s", "change_s", "rss_10", "rss_end", "growth", "peak_MiB");
  for (BenchModel which : {BenchModel::kTiny, BenchModel::kMedium}) {
    if (tiny_only && which != BenchModel::kTiny) continue;
    const BenchSetup m = open_bench_model(which, scratch.path());
    run_stream(m.name, *m.engine, m.request("a benchmark", 1), chunks);
  }
  std::printf(
      "\n1st_frame: from generate() to the first frames; period_s / max_s: the median and the longest time\n"
      "between two chunks' frames; change_s: the period of the chunk that took the new prompt (its text\n"
      "encode and prefill included); rss_10 / rss_end: the largest resident set sampled at chunks 10-19\n"
      "and at the last 10 chunks, growth between them; peak_MiB: the stream's peak (weights included).\n");
  return 0;
}

}  // namespace

H3_REGISTER_COMMAND(
    "bench live", "an endless causal stream: first frame, chunk period, RSS after 10 and 100 chunks",
    "usage: h3 bench live [--chunks N] [--tiny-only] [--dir DIR]\n"
    "\n"
    "Runs an endless causal stream (num_frames -1, a random LoRA, a prompt change half way) on\n"
    "the tiny default model at its default size and on a medium random model (written to a temp\n"
    "folder under DIR, deleted after) at 320x192, finishes it after N chunks (default 100), and\n"
    "prints the time to the first frames, the period between chunks, the prompt change's chunk,\n"
    "and the resident set after 10 chunks and at the end.\n",
    run);

}  // namespace h3::tools
