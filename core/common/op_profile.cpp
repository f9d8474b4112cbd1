#include "common/op_profile.h"

#include <atomic>

namespace h3 {
namespace {

constexpr int kKinds = static_cast<int>(OpKind::kCount);
std::atomic<bool> enabled{false};
std::atomic<int64_t> nanoseconds[kKinds];
std::atomic<int64_t> call_counts[kKinds];

}  // namespace

const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::kAttention: return "attention";
    case OpKind::kLinear: return "linears";
    case OpKind::kTextEncode: return "text encode";
    case OpKind::kAudioDecode: return "audio decode";
    case OpKind::kCount: break;
  }
  return "?";
}

void op_profile_enable(bool on) {
  enabled.store(on, std::memory_order_relaxed);
}

bool op_profile_enabled() {
  return enabled.load(std::memory_order_relaxed);
}

void op_profile_reset() {
  for (int i = 0; i < kKinds; ++i) {
    nanoseconds[i].store(0, std::memory_order_relaxed);
    call_counts[i].store(0, std::memory_order_relaxed);
  }
}

OpTotals op_profile_totals() {
  OpTotals t;
  for (int i = 0; i < kKinds; ++i) {
    t.seconds[i] = 1e-9 * static_cast<double>(nanoseconds[i].load(std::memory_order_relaxed));
    t.calls[i] = call_counts[i].load(std::memory_order_relaxed);
  }
  return t;
}

OpTimer::OpTimer(OpKind kind) : kind_(kind), on_(op_profile_enabled()) {
  if (on_) start_ = std::chrono::steady_clock::now();
}

OpTimer::~OpTimer() {
  if (!on_) return;
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
  const int i = static_cast<int>(kind_);
  nanoseconds[i].fetch_add(ns, std::memory_order_relaxed);
  call_counts[i].fetch_add(1, std::memory_order_relaxed);
}

}  // namespace h3
