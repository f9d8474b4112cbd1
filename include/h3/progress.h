// Progress reports and cancellation of the engine (docs/engine.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace h3 {

// kPrompt: a causal request's prompt changed; `chunk` is the chunk it applies from.
// kSteps: a causal request's forwards per chunk changed (StreamControl::change_steps); `chunk` is
// the first chunk made with `chunk_steps` forwards.
enum class Phase { kLoading, kConditioning, kDenoising, kDecoding, kDone, kPrompt, kSteps };
const char* to_string(Phase);

struct Progress {
  Phase phase;
  int64_t step = 0, total_steps = 0;     // loading: component i of n; denoising: step i of N-1 evaluations
  int64_t chunk = 0, total_chunks = 0;   // decoding: chunks delivered so far
  int64_t frames = 0, total_frames = 0;  // frames delivered so far
  double elapsed_s = 0;                  // since generate() (or open()) began
  std::string prompt{};                  // kPrompt: the prompt taken (the stream's marking records it)
  int64_t chunk_steps = 0;               // kSteps: forwards per chunk from `chunk` on
};

// Called on the thread that called Engine::open / Engine::generate (the engine hands rank 0's
// reports over to it), never concurrently with the sink.
using ProgressFn = std::function<void(const Progress&)>;

// Thread-safe: any thread may cancel. The engine polls it at step and chunk boundaries and
// agrees on it across ranks; a token stays cancelled until reset().
// The caller's hold on a running request. Besides cancel: a causal request's prompt and step
// changes and the end of an endless one (docs/causal.md "Live"), taken at its next chunk boundary
// (a prompt change also inside the chunk being made).
class StreamControl {
 public:
  void cancel() { flag_.store(true, std::memory_order_release); }
  bool requested() const { return flag_.load(std::memory_order_acquire); }
  // An endless request (num_frames -1): end it at the next chunk boundary, every whole chunk and
  // the soundtrack up to its last frame delivered; generate() then returns normally.
  void finish() { finish_.store(true, std::memory_order_release); }
  bool finish_requested() const { return finish_.load(std::memory_order_acquire); }
  // A new prompt for a causal request from its first chunk that starts at or after
  // `at_seconds` into the clip (0: the chunk being made, made again under it if its last forward
  // has not run, else the next; docs/causal.md "A change inside a chunk"); the engine reports
  // each one applied with a Phase::kPrompt progress. An empty prompt is ignored.
  void change_prompt(std::string prompt, double at_seconds = 0) {
    if (prompt.empty()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto at = prompts_.begin();
    while (at != prompts_.end() && at->first <= at_seconds) ++at;
    prompts_.insert(at, {at_seconds, std::move(prompt)});
  }
  // The engine's side: the last prompt due by `seconds` (those before it are superseded).
  std::optional<std::string> take_prompt(double seconds) const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::optional<std::string> p;
    while (!prompts_.empty() && prompts_.front().first <= seconds + 1e-9) {
      p = std::move(prompts_.front().second);
      prompts_.erase(prompts_.begin());
    }
    return p;
  }
  // New forwards per chunk for a causal request from its next chunk boundary (a live stream
  // keeping pace: gst/pace_policy.h). Kept within [GenerationRequest::min_steps, steps] (a
  // request without min_steps keeps its steps); the engine reports a change it applies with a
  // Phase::kSteps progress. The last one given before the boundary wins.
  void change_steps(int64_t steps) { steps_.store(steps, std::memory_order_release); }
  // The engine's side: the count asked since the last take, or 0.
  int64_t take_steps() const { return steps_.exchange(0, std::memory_order_acq_rel); }
  void reset() {
    flag_.store(false, std::memory_order_release);
    finish_.store(false, std::memory_order_release);
    steps_.store(0, std::memory_order_release);
    std::lock_guard<std::mutex> lock(mutex_);
    prompts_.clear();
  }

 private:
  std::atomic<bool> flag_{false};
  std::atomic<bool> finish_{false};
  mutable std::atomic<int64_t> steps_{0};  // a change_steps not taken yet; 0: none
  mutable std::mutex mutex_;
  mutable std::vector<std::pair<double, std::string>> prompts_;  // by time
};

}  // namespace h3
