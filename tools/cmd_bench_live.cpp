// `h3 bench live`: an endless causal stream (docs/causal.md "Live") on the tiny default model and
// on the medium random model with a random LoRA, with its soundtrack: time to the first frames,
// the period between chunks, the resident set after 10 chunks and at the end, and a prompt
// change's cost (its chunk's period against the others'). A soak (`--chunks 2000
// --prompt-every 50`) also prints the resident set every 100 chunks beside what glibc's heap
// holds and what the engine holds (KV cache, latents, the CPU block cache), and checks the frames
// and audio samples delivered against N·17 and round(N·17·5/3)·800 exactly (the only check that
// fails the command). With --pace: the same stream against real time (emulated: a sink that
// plays its frames at 24 fps from the first chunk's arrival and holds the engine while two chunks
// wait, as the element's queue does), without and with the element's pace policy
// (gst/pace_policy.h): each chunk's lateness, and the forwards per chunk it ran with. Figures
// only; nothing asserts a time or a size.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/cpu_block_cache.h"
#include "engine/engine.h"
#include "gst/pace_policy.h"
#include "h3/causal_held.h"
#include "h3/error.h"
#include "h3/model_clock.h"
#include "tools/bench_fixture.h"
#include "tools/command.h"
#include "tools/process_memory.h"
#include "tools/scratch_dir.h"

namespace h3::tools {
namespace {

// Prompts of the default model's grammar (train/tiny/data.py), of different lengths in tokens, so
// that each change also changes the prompt's record in the KV cache and the shapes it reads.
const std::vector<std::string> kSoakPrompts = {
    "a red circle moving right on a black background",    "a blue square moving left on a white background",
    "a green triangle bouncing on a gray background",     "a yellow circle growing on a black background",
    "an orange square moving down on a white background",
};

constexpr int64_t kSeriesEvery = 100;  // chunks between two lines of the memory series

struct LiveOptions {
  int64_t chunks = 100;
  int64_t prompt_every = 0;  // 0: `changes` changes from half way, every third chunk
  int64_t changes = 1;
  PromptSwitch prompt_switch = PromptSwitch::kKeep;  // what a change does to the kept chunks
};

// One line of the memory series, taken as chunk `chunk` (1-based count) arrived.
struct MemoryPoint {
  int64_t chunk = 0;
  double rss = 0;  // the largest resident set of the 10 chunks up to it (ArrivalSink::rss_over)
  HeapMib heap;
  CpuBlockCacheStats blocks;
  CausalHeld held;
};

// The frames and samples an endless stream of `chunks` whole chunks carries (docs/causal.md).
int64_t expected_frames(int64_t chunks) {
  return chunks * dit::kChunkFrames;
}
int64_t expected_samples(int64_t chunks) {
  return std::llround(static_cast<double>(chunks * dit::kChunkFrames) * 5.0 / 3.0) * 800;
}

// Runs the stream; false when the frames or samples delivered are not exactly the expected.
bool run_stream(const char* name, Engine& e, GenerationRequest r, const LiveOptions& o) {
  const int64_t chunks = o.chunks;
  r.num_frames = kEndless;
  r.sampler = Sampler::kCausal;
  r.audio = true;
  r.prompt_switch = o.prompt_switch;
  // The chunks that take a new prompt (its text encode and prefill).
  std::vector<int64_t> changes;
  if (o.prompt_every > 0) {
    r.prompt = kSoakPrompts[0];
    for (int64_t c = o.prompt_every, k = 1; c < chunks; c += o.prompt_every, ++k) {
      r.prompt_timeline.push_back(
          {dit::chunk_start_seconds(c), kSoakPrompts[static_cast<size_t>(k) % kSoakPrompts.size()]});
      changes.push_back(c);
    }
  } else {
    // Changes from half way, every third chunk (so that no chunk between two changes is one's
    // neighbour): each re-encodes the prompt and prefills it again (recache: and recomputes the
    // kept chunks). Two prompts in turn, so that each change is a change.
    for (int64_t i = 0; i < o.changes; ++i) {
      const int64_t c = chunks / 2 + 3 * i;
      r.prompt_timeline.push_back(
          {dit::chunk_start_seconds(c), i % 2 == 0 ? "the same scene at night" : "the same scene at dawn"});
      changes.push_back(c);
    }
  }
  StreamControl control;
  reset_peak_rss();
  ArrivalSink sink(BenchClock::now(), &control, chunks, /*sample_rss=*/true);
  CausalHeld last_held;
  std::vector<MemoryPoint> series;
  sink.on_arrival = [&] {
    const auto n = static_cast<int64_t>(sink.arrivals.size());
    if (n % kSeriesEvery != 0 && n != chunks) return;
    MemoryPoint p;
    p.chunk = n;
    p.rss = sink.rss_over(sink.rss.size() - std::min<size_t>(10, sink.rss.size()));
    p.heap = heap_mib();
    p.blocks = cpu_block_cache_stats();
    p.held = last_held;
    series.push_back(p);
  };
  int64_t prompts_taken = 0;
  GenerateExtras extras;
  extras.on_causal_chunk = [&](const CausalHeld& h) { last_held = h; };
  auto progress = [&](const Progress& p) {
    if (p.phase == Phase::kPrompt) ++prompts_taken;
  };
  e.generate(r, sink, progress, control, extras);

  const auto& a = sink.arrivals;
  std::vector<double> periods;
  for (size_t i = 1; i < a.size(); ++i) periods.push_back(a[i] - a[i - 1]);
  std::vector<double> sorted = periods;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  // The chunks that followed a change: the frames of chunk c leave once chunk c + 1 is made.
  std::vector<double> change_periods;
  for (int64_t c : changes) {
    const auto i = static_cast<size_t>(c - 1);
    if (i < periods.size()) change_periods.push_back(periods[i]);
  }
  std::sort(change_periods.begin(), change_periods.end());
  const double change = change_periods.empty() ? 0 : change_periods[change_periods.size() / 2];
  const double early = sink.rss_over(10), late = sink.rss_over(sink.rss.size() - 10);
  std::printf("%-8s %7lld %9.3f %9.3f %9.3f %9.3f %8.1f %8.1f %+7.2f%% %8.1f\n", name, (long long)a.size(),
              a.front(), median, sorted.empty() ? 0 : sorted.back(), change, early, late,
              early > 0 ? 100.0 * (late - early) / early : 0.0, status_mib("VmHWM:"));

  if (series.size() >= 2) {
    std::printf(
        "  %s, every %lld chunks: RSS (MiB, the largest of the 10 chunks up to it), glibc's heap in use and\n"
        "  kept free, the CPU block cache's kept and in-use blocks, the KV cache and latents held (KiB)\n",
        name, (long long)kSeriesEvery);
    std::printf("  %7s %8s %8s %8s %8s %8s %8s %8s %8s\n", "chunk", "rss", "vs_100", "heap_use", "heap_free",
                "blk_kept", "blk_use", "kv_KiB", "lat_KiB");
    const double base = series.front().rss;
    for (const MemoryPoint& p : series) {
      std::printf("  %7lld %8.1f %+7.2f%% %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f\n", (long long)p.chunk, p.rss,
                  base > 0 ? 100.0 * (p.rss - base) / base : 0.0, p.heap.in_use, p.heap.free,
                  static_cast<double>(p.blocks.kept_bytes) / (1 << 20),
                  static_cast<double>(p.blocks.in_use_bytes) / (1 << 20), p.held.kv_bytes / 1024.0,
                  p.held.latent_bytes / 1024.0);
    }
    const double growth = base > 0 ? 100.0 * (series.back().rss - base) / base : 0.0;
    std::printf("  %s: RSS chunk %lld -> %lld: %.1f -> %.1f MiB (%+.2f %%), %s 2 %%\n", name,
                (long long)series.front().chunk, (long long)series.back().chunk, base, series.back().rss,
                growth, std::abs(growth) <= 2.0 ? "within" : "NOT within");
  }
  const int64_t n = static_cast<int64_t>(a.size());
  const bool frames_ok = sink.frames == expected_frames(n);
  const bool samples_ok = sink.samples == expected_samples(n) && sink.audio_gap < 0;
  std::printf(
      "  %s: prompt changes taken %lld of %zu; frames %lld, %lld x 17 = %lld: %s; audio samples %lld, "
      "round(%lld x 17 x 5/3) x 800 = %lld: %s",
      name, (long long)prompts_taken, changes.size(), (long long)sink.frames, (long long)n,
      (long long)expected_frames(n), frames_ok ? "OK" : "MISMATCH", (long long)sink.samples, (long long)n,
      (long long)expected_samples(n), samples_ok ? "OK" : "MISMATCH");
  if (sink.audio_gap >= 0)
    std::printf(" (a stretch did not start at sample %lld)", (long long)sink.audio_gap);
  std::printf("\n");
  std::fflush(stdout);
  return frames_ok && samples_ok && prompts_taken == static_cast<int64_t>(changes.size());
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  double one = 0, five = 0, fifteen = 0;
  f >> one >> five >> fifteen;
  char out[64];
  std::snprintf(out, sizeof out, "%.2f %.2f %.2f", one, five, fifteen);
  return out;
}

// Plays the stream against real time: chunk c's first frame is due at t0 + c * 17/24 s (t0: the
// first chunk's arrival); a chunk that arrives after that is late by the difference (negative:
// early). Like the element's frame queue (queue-chunks 2), the sink holds the engine while two
// chunks wait to be played. With a policy, each chunk's lateness and production time (its arrival
// since the sink let the engine go) are what the element's policy sees.
class RealTimeSink : public ChunkSink {
 public:
  RealTimeSink(StreamControl& control, int64_t chunks, h3gst::PacePolicy* policy)
      : control_(control), chunks_(chunks), policy_(policy) {}

  void on_chunk(const Chunk& c) override {
    if (!c.frames.defined()) return;
    const auto now = BenchClock::now();
    at_chunk(c.index);
    if (lateness.empty()) t0_ = released_ = now;
    const auto due = t0_ + std::chrono::duration_cast<BenchClock::duration>(period_ * c.index);
    const double late = std::chrono::duration<double>(now - due).count();
    const auto production = std::chrono::duration_cast<std::chrono::nanoseconds>(now - released_).count();
    lateness.push_back(late);
    steps.push_back(steps_now);
    if (policy_ != nullptr && c.index > 0) {
      if (auto d = policy_->observe(c.index, static_cast<int64_t>(late * 1e9), production)) {
        control_.change_steps(d->steps);
        std::printf("  chunk %4lld: %+7.2f s late, chunk made in %.2f s: asking for %lld (%s)\n",
                    (long long)c.index, late, production / 1e9, (long long)d->steps, d->reason.c_str());
        std::fflush(stdout);
      }
    }
    if (static_cast<int64_t>(lateness.size()) == chunks_) control_.finish();
    // Two chunks may wait: this one may be made once the one before the previous has played.
    std::this_thread::sleep_until(due - std::chrono::duration_cast<BenchClock::duration>(period_));
    released_ = BenchClock::now();
  }

  // The engine's kSteps report: chunks from `chunk` on run `n` forwards.
  void applied(int64_t chunk, int64_t n) {
    pending_.emplace(chunk, n);
    if (policy_ != nullptr) policy_->applied(chunk, n);
  }

  std::vector<double> lateness;  // seconds, per chunk
  std::vector<int64_t> steps;    // forwards per chunk, per chunk
  int64_t steps_now = 4;

 private:
  // Before a chunk's arrival is recorded: the count it was made with.
  void at_chunk(int64_t chunk) {
    while (!pending_.empty() && pending_.begin()->first <= chunk) {
      steps_now = pending_.begin()->second;
      pending_.erase(pending_.begin());
    }
  }

  StreamControl& control_;
  const int64_t chunks_;
  h3gst::PacePolicy* policy_;
  const std::chrono::duration<double> period_{17.0 / 24.0};
  BenchClock::time_point t0_, released_;
  std::map<int64_t, int64_t> pending_;  // changes taken by the engine, by their first chunk
};

void run_paced(const char* name, Engine& e, GenerationRequest r, int64_t chunks, bool pace) {
  r.num_frames = kEndless;
  r.sampler = Sampler::kCausal;
  r.steps = 4;
  if (pace) r.min_steps = 2;
  const std::string load_before = load_average();
  std::optional<h3gst::PacePolicy> policy;
  if (pace) {
    h3gst::PaceSettings ps;
    ps.steps = 4;
    ps.min_steps = 2;
    policy.emplace(ps);
  }
  StreamControl control;
  RealTimeSink sink(control, chunks, policy ? &*policy : nullptr);
  auto progress = [&](const Progress& p) {
    if (p.phase == Phase::kSteps) sink.applied(p.chunk, p.chunk_steps);
  };
  const auto t0 = BenchClock::now();
  e.generate(r, sink, progress, control);
  const double wall = seconds_since(t0);
  std::vector<double> sorted = sink.lateness;
  std::sort(sorted.begin(), sorted.end());
  const auto at = [&](size_t c) { return c < sink.lateness.size() ? sink.lateness[c] : 0.0; };
  std::map<int64_t, int64_t> histogram;
  for (int64_t s : sink.steps) ++histogram[s];
  std::string hist;
  for (auto it = histogram.rbegin(); it != histogram.rend(); ++it) {
    hist += (hist.empty() ? "" : " ") + std::to_string(it->first) + ":" + std::to_string(it->second);
  }
  std::printf("%-8s %-4s %6zu %+8.2f %+8.2f %+8.2f %+8.2f %+8.2f %-16s %7.1f  %s -> %s\n", name,
              pace ? "on" : "off", sink.lateness.size(), sorted[sorted.size() / 2], sorted.back(), at(49),
              at(99), sink.lateness.back(), hist.c_str(), wall, load_before.c_str(), load_average().c_str());
  std::fflush(stdout);
}

int run(Args& a) {
  const std::string tmp_base = a.string_or("dir", std::filesystem::temp_directory_path().string());
  LiveOptions o;
  o.chunks = a.int_or("chunks", 100, 12, 100000);
  o.prompt_every = a.int_or("prompt-every", 0, 0, 100000);
  const bool tiny_only = a.flag("tiny-only");
  const bool medium_only = a.flag("medium-only");
  const bool pace = a.flag("pace");
  // Which of the two streams: both one after the other, or one (two processes can then run them
  // side by side, under the same load).
  const std::string runs = a.string_or("pace-runs", "off,on");
  if (runs != "off,on" && runs != "off" && runs != "on") {
    std::fprintf(stderr, "h3 bench live: --pace-runs %s: give off, on or off,on\n", runs.c_str());
    return 2;
  }
  o.prompt_switch = parse_prompt_switch(a.string_or("prompt-switch", to_string(PromptSwitch::kKeep)));
  o.changes = a.int_or("changes", 1, 1, 1000);
  a.finish();
  if (o.prompt_every == 0 && o.chunks / 2 + 3 * (o.changes - 1) >= o.chunks - 1) {
    throw UsageError{"--changes " + std::to_string(o.changes) + " do not fit in the second half of " +
                     std::to_string(o.chunks) + " chunks (one every third chunk): give more --chunks"};
  }
  if (tiny_only && medium_only)
    throw Error(ErrorKind::kInvalidArgument, "--tiny-only and --medium-only: give one");
  const ScratchDir scratch(tmp_base, "h3-bench-live-");
  if (pace) {
    std::printf(
        "h3 bench live --pace (CPU, fp32, 1 rank; endless causal streams of %lld chunks, 4 forwards per\n"
        "chunk, against real time emulated at 24 fps, without and with the pace policy)\n",
        (long long)o.chunks);
    for (BenchModel which : {BenchModel::kTiny, BenchModel::kMedium}) {
      if (tiny_only != (which == BenchModel::kTiny)) continue;
      const BenchSetup m = open_bench_model(which, scratch.path());
      std::printf("%-8s %-4s %6s %8s %8s %8s %8s %8s %-16s %7s  %s\n", "model", "pace", "chunks", "median_s",
                  "max_s", "at_50", "at_100", "last_s", "steps:chunks", "wall_s", "loadavg before -> after");
      for (bool on : {false, true}) {
        if (runs.find(on ? "on" : "off") == std::string::npos) continue;
        run_paced(m.name, *m.engine, m.request("a benchmark", 1), o.chunks, on);
      }
    }
    std::printf(
        "\nmedian_s / max_s: each chunk's lateness against real time (its arrival after its first frame was\n"
        "due; negative: early), over the stream; at_50 / at_100 / last_s: at chunks 50, 100 and the last;\n"
        "steps:chunks: how many chunks ran with each count of forwards; loadavg: /proc/loadavg's 1, 5 and\n"
        "15 minute figures (the machine is shared: the latenesses move with it, the counts less).\n");
    return 0;
  }
  std::printf(
      "h3 bench live (CPU, fp32, 1 rank; endless causal streams with audio finished after %lld chunks, 4\n"
      "forwards per chunk, sink 2, window 2, relative positions, prompt switch %s; ",
      (long long)o.chunks, to_string(o.prompt_switch));
  if (o.prompt_every > 0) {
    std::printf("a prompt change every %lld chunks, %zu prompts in turn)\n", (long long)o.prompt_every,
                kSoakPrompts.size());
  } else {
    std::printf("%lld prompt change(s) from chunk %lld, every third chunk)\n", (long long)o.changes,
                (long long)(o.chunks / 2));
  }
  std::printf("%-8s %7s %9s %9s %9s %9s %8s %8s %8s %8s\n", "model", "chunks", "1st_frame", "period_s",
              "max_s", "change_s", "rss_10", "rss_end", "growth", "peak_MiB");
  bool all_ok = true;
  for (BenchModel which : {BenchModel::kTiny, BenchModel::kMedium}) {
    if (tiny_only && which != BenchModel::kTiny) continue;
    if (medium_only && which != BenchModel::kMedium) continue;
    const BenchSetup m = open_bench_model(which, scratch.path());
    const std::string first = o.prompt_every > 0 ? kSoakPrompts[0] : "a benchmark";
    all_ok = run_stream(m.name, *m.engine, m.request(first, 1), o) && all_ok;
  }
  std::printf(
      "\n1st_frame: from generate() to the first frames; period_s / max_s: the median and the longest time\n"
      "between two chunks' frames; change_s: the median period of the chunks that took a new prompt (its\n"
      "text encode and prefill included, and with recache the kept chunks' commit forwards again); rss_10 / "
      "rss_end: the largest resident set sampled at chunks "
      "10-19\n"
      "and at the last 10 chunks, growth between them; peak_MiB: the stream's peak (weights included).\n");
  return all_ok ? 0 : 1;
}

}  // namespace

H3_REGISTER_COMMAND(
    "bench live", "an endless causal stream: first frame, chunk period, RSS over the stream, exact counts",
    "usage: h3 bench live [--chunks N] [--prompt-every K | --changes K] [--prompt-switch keep|recache]\n"
    "                     [--tiny-only | --medium-only] [--pace [--pace-runs off|on|off,on]] [--dir DIR]\n"
    "\n"
    "Runs an endless causal stream with its soundtrack (num_frames -1, a random LoRA) on the tiny\n"
    "default model at its default size and on a medium random model (written to a temp folder under\n"
    "DIR, deleted after) at 320x192, finishes it after N chunks (default 100, at least 12), and prints\n"
    "the time to the first frames, the period between chunks, the prompt changes' chunks, and the\n"
    "resident set after 10 chunks and at the end. The prompt changes once, half way (--changes K: K\n"
    "times from half way, every third chunk, change_s the median of their chunks' periods); with\n"
    "--prompt-every K every K chunks, in turn through five prompts of the default model's grammar.\n"
    "--prompt-switch: what a change does to the kept chunks (keep by default, or recache).\n"
    "From 200 chunks on it also prints the memory every 100 chunks (RSS, glibc's heap, the CPU block\n"
    "cache, the KV cache and latents held) and RSS at chunk 100 against the end. It checks the frames\n"
    "and audio samples delivered against N x 17 and round(N x 17 x 5/3) x 800 and the prompt changes\n"
    "taken, printing OK or MISMATCH, and exits 1 on a mismatch.\n"
    "\n"
    "A soak: h3 bench live --chunks 2000 --prompt-every 50 --tiny-only\n"
    "\n"
    "--pace: on the medium model only (the tiny one with --tiny-only), the stream against real time\n"
    "(emulated: its frames played at 24 fps from the first chunk's arrival, two chunks queued), once\n"
    "without and once with the element's pace policy (pace=steps: 4 -> 3 -> 2 forwards per chunk while\n"
    "late, back up when there is room): each chunk's lateness (median, max, at chunks 50 and 100, the\n"
    "last) and how many chunks ran with each count. --pace-runs: only the one without (off) or with\n"
    "(on) it, to run the two side by side in two processes under the same load.\n",
    run);

}  // namespace h3::tools
