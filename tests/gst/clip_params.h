// The small clip the element tests ask the tiny default model for: a width that
// is not a multiple of 32 (so the engine crops), and enough frames for several
// decode chunks (so that streaming is observable).
#pragma once

#include <cstdint>

namespace h3test {
constexpr int kWidth = 80;
constexpr int kHeight = 48;
constexpr int64_t kFrames = 22;
}  // namespace h3test
