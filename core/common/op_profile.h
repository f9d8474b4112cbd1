// Wall time by kind of work, summed while a profile is on (`h3 bench generate --profile`): where a
// denoising step's time goes (attention, linears, the rest) and how long the text encoder and the
// audio decode take, without a profiler. Off, a timer costs one relaxed atomic load.
//
// A timer counts the calling thread's wall time from its construction to its destruction. The
// instrumented calls are the top-level ones (h3::linear and its fused forms, the DiT's attention,
// the text encoder's forward, the audio decoder's range): a linear inside a timed attention or a
// text-encoder forward counts in both, so a reader subtracts per phase (the profile does). The
// sums add every rank's thread; with one rank they are that rank's wall time.
#pragma once

#include <chrono>
#include <cstdint>

namespace h3 {

enum class OpKind { kAttention, kLinear, kTextEncode, kAudioDecode, kCount };
const char* to_string(OpKind);

// Turns the sums on or off (they are kept; op_profile_reset clears them).
void op_profile_enable(bool on);
bool op_profile_enabled();
void op_profile_reset();

struct OpTotals {
  double seconds[static_cast<int>(OpKind::kCount)] = {};
  int64_t calls[static_cast<int>(OpKind::kCount)] = {};
  double operator[](OpKind k) const { return seconds[static_cast<int>(k)]; }
};
OpTotals op_profile_totals();

// Adds its lifetime to `kind` when the profile was on at its construction.
class OpTimer {
 public:
  explicit OpTimer(OpKind kind);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  OpKind kind_;
  bool on_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace h3
