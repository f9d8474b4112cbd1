// Progress reports and cancellation of the engine (docs/engine.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

namespace h3 {

enum class Phase { kLoading, kConditioning, kDenoising, kDecoding, kDone };
const char* to_string(Phase);

struct Progress {
  Phase phase;
  int64_t step = 0, total_steps = 0;     // loading: component i of n; denoising: step i of N-1 evaluations
  int64_t chunk = 0, total_chunks = 0;   // decoding: chunks delivered so far
  int64_t frames = 0, total_frames = 0;  // frames delivered so far
  double elapsed_s = 0;                  // since generate() (or open()) began
};

// Called on the thread that called Engine::open / Engine::generate (the engine hands rank 0's
// reports over to it), never concurrently with the sink.
using ProgressFn = std::function<void(const Progress&)>;

// Thread-safe: any thread may cancel. The engine polls it at step and chunk boundaries and
// agrees on it across ranks; a token stays cancelled until reset().
class CancelToken {
 public:
  void cancel() { flag_.store(true, std::memory_order_release); }
  bool requested() const { return flag_.load(std::memory_order_acquire); }
  void reset() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

}  // namespace h3
