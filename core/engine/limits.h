// The limits and defaults of a request and of the engine's options, written once: the engine
// enforces them (make_plan, Engine::open) and the GStreamer element's property ranges and
// defaults are these same numbers. Torch-free: the plugin includes it.
#pragma once

#include <chrono>
#include <cstdint>

namespace h3 {

// A request outside these ranges is h3::Error(kInvalidArgument) naming the field.
constexpr int64_t kMinSide = 16, kMaxSide = 4096;  // width, height in pixels
constexpr int64_t kMinFrames = 1, kMaxFrames = 1024;
constexpr int64_t kMinSteps = 2, kMaxSteps = 1000;  // grid points N (N-1 evaluations)

// Ranks as threads in one process; every rank is a tensor-parallel rank of the DiT.
constexpr int kMinRanks = 1, kMaxRanks = 64;

// How long a rank waits at a collective for a peer that shows no sign of life.
constexpr std::chrono::seconds kDefaultTimeout{120};

}  // namespace h3
