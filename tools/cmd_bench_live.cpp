// `h3 bench live`: an endless causal stream (docs/causal.md "Live") on the tiny default model and
// on the medium random model with a random LoRA: time to the first frames, the period between
// chunks, the resident set after 10 chunks and after 100 (flat: the KV cache holds the prompt,
// the sink and the window; each chunk's latents leave once decoded), and a prompt change's cost
// (its chunk's period against the others'). With --pace: the same stream against real time
// (emulated: a sink that plays its frames at 24 fps from the first chunk's arrival and holds the
// engine while two chunks wait, as the element's queue does), without and with the element's pace
// policy (gst/pace_policy.h): each chunk's lateness, and the forwards per chunk it ran with.
// Figures only; nothing asserts a time.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "gst/pace_policy.h"
#include "h3/model_clock.h"
#include "tools/bench_fixture.h"
#include "tools/command.h"
#include "tools/process_memory.h"
#include "tools/scratch_dir.h"

namespace h3::tools {
namespace {

void run_stream(const char* name, Engine& e, GenerationRequest r, int64_t chunks, PromptSwitch mode,
                int64_t changes) {
  r.num_frames = kEndless;
  r.sampler = Sampler::kCausal;
  r.prompt_switch = mode;
  // Prompt changes from half way, every third chunk (so that no chunk between two changes is one's
  // neighbour): each re-encodes the prompt and prefills it again (recache: and recomputes the kept
  // chunks). Two prompts in turn, so that each change is a change.
  for (int64_t i = 0; i < changes; ++i) {
    r.prompt_timeline.push_back({dit::chunk_start_seconds(chunks / 2 + 3 * i),
                                 i % 2 == 0 ? "the same scene at night" : "the same scene at dawn"});
  }
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
  // The chunk that follows a change: the frames of chunk c leave once chunk c + 1 is made. The
  // median over the changes.
  std::vector<double> changed;
  for (int64_t i = 0; i < changes; ++i) {
    const size_t at = static_cast<size_t>(chunks / 2 + 3 * i) - 1;
    if (at < periods.size()) changed.push_back(periods[at]);
  }
  std::sort(changed.begin(), changed.end());
  const double change = changed.empty() ? 0 : changed[changed.size() / 2];
  const double early = sink.rss_over(10), late = sink.rss_over(sink.rss.size() - 10);
  std::printf("%-8s %7lld %9.3f %9.3f %9.3f %9.3f %8.1f %8.1f %+7.2f%% %8.1f\n", name, (long long)a.size(),
              a.front(), median, sorted.empty() ? 0 : sorted.back(), change, early, late,
              early > 0 ? 100.0 * (late - early) / early : 0.0, status_mib("VmHWM:"));
  std::fflush(stdout);
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
  const int64_t chunks = a.int_or("chunks", 100, 12, 100000);
  const bool tiny_only = a.flag("tiny-only");
  const bool pace = a.flag("pace");
  // Which of the two streams: both one after the other, or one (two processes can then run them
  // side by side, under the same load).
  const std::string runs = a.string_or("pace-runs", "off,on");
  if (runs != "off,on" && runs != "off" && runs != "on") {
    std::fprintf(stderr, "h3 bench live: --pace-runs %s: give off, on or off,on\n", runs.c_str());
    return 2;
  }
  const PromptSwitch mode = parse_prompt_switch(a.string_or("prompt-switch", to_string(PromptSwitch::kKeep)));
  const int64_t changes = a.int_or("changes", 1, 1, 1000);
  a.finish();
  if (chunks / 2 + 3 * (changes - 1) >= chunks - 1) {
    throw UsageError{"--changes " + std::to_string(changes) + " do not fit in the second half of " +
                     std::to_string(chunks) + " chunks (one every third chunk): give more --chunks"};
  }
  const ScratchDir scratch(tmp_base, "h3-bench-live-");
  if (pace) {
    std::printf(
        "h3 bench live --pace (CPU, fp32, 1 rank; endless causal streams of %lld chunks, 4 forwards per\n"
        "chunk, against real time emulated at 24 fps, without and with the pace policy)\n",
        (long long)chunks);
    for (BenchModel which : {BenchModel::kTiny, BenchModel::kMedium}) {
      if (tiny_only != (which == BenchModel::kTiny)) continue;
      const BenchSetup m = open_bench_model(which, scratch.path());
      std::printf("%-8s %-4s %6s %8s %8s %8s %8s %8s %-16s %7s  %s\n", "model", "pace", "chunks", "median_s",
                  "max_s", "at_50", "at_100", "last_s", "steps:chunks", "wall_s", "loadavg before -> after");
      for (bool on : {false, true}) {
        if (runs.find(on ? "on" : "off") == std::string::npos) continue;
        run_paced(m.name, *m.engine, m.request("a benchmark", 1), chunks, on);
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
      "h3 bench live (CPU, fp32, 1 rank; endless causal streams finished after %lld chunks, 4 forwards\n"
      "per chunk, sink 2, window 2, relative positions; %lld prompt change(s) from chunk %lld, every third\n"
      "chunk, prompt switch %s)\n",
      (long long)chunks, (long long)changes, (long long)(chunks / 2), to_string(mode));
  std::printf("%-8s %7s %9s %9s %9s %9s %8s %8s %8s %8s\n", "model", "chunks", "1st_frame", "period_s",
              "max_s", "change_s", "rss_10", "rss_end", "growth", "peak_MiB");
  for (BenchModel which : {BenchModel::kTiny, BenchModel::kMedium}) {
    if (tiny_only && which != BenchModel::kTiny) continue;
    const BenchSetup m = open_bench_model(which, scratch.path());
    run_stream(m.name, *m.engine, m.request("a benchmark", 1), chunks, mode, changes);
  }
  std::printf(
      "\n1st_frame: from generate() to the first frames; period_s / max_s: the median and the longest time\n"
      "between two chunks' frames; change_s: the period of a chunk that took a new prompt (the median over\n"
      "the changes; its text\n"
      "encode and prefill included, and with recache the kept chunks' commit forwards again); rss_10 / "
      "rss_end: the largest resident set sampled at chunks 10-19\n"
      "and at the last 10 chunks, growth between them; peak_MiB: the stream's peak (weights included).\n");
  return 0;
}

}  // namespace

H3_REGISTER_COMMAND(
    "bench live", "an endless causal stream: first frame, chunk period, RSS after 10 and 100 chunks",
    "usage: h3 bench live [--chunks N] [--tiny-only] [--pace [--pace-runs off|on|off,on]]\n"
    "                      [--prompt-switch keep|recache] [--changes K] [--dir DIR]\n"
    "\n"
    "Runs an endless causal stream (num_frames -1, a random LoRA, a prompt change half way) on\n"
    "the tiny default model at its default size and on a medium random model (written to a temp\n"
    "folder under DIR, deleted after) at 320x192, finishes it after N chunks (default 100), and\n"
    "prints the time to the first frames, the period between chunks, the prompt change's chunk\n"
    "(--prompt-switch: what it does to the kept chunks, keep by default; --changes K: K changes from\n"
    "half way, every third chunk, the median of their chunks' periods), and the resident set after\n"
    "10 chunks and at the end.\n"
    "\n"
    "--pace: on the medium model only (the tiny one with --tiny-only), the stream against real time\n"
    "(emulated: its frames played at 24 fps from the first chunk's arrival, two chunks queued), once\n"
    "without and once with the element's pace policy (pace=steps: 4 -> 3 -> 2 forwards per chunk while\n"
    "late, back up when there is room): each chunk's lateness (median, max, at chunks 50 and 100, the\n"
    "last) and how many chunks ran with each count. --pace-runs: only the one without (off) or with\n"
    "(on) it, to run the two side by side in two processes under the same load.\n",
    run);

}  // namespace h3::tools
