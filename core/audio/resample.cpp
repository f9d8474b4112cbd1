#include "audio/resample.h"

#include <ATen/ATen.h>

#include <cmath>
#include <numeric>

#include "h3/error.h"

namespace h3::audio {
namespace {

constexpr double kZeroCrossings = 6.0;  // the filter's half width, in zero crossings
constexpr double kRolloff = 0.99;       // cutoff as a fraction of the lower rate's Nyquist

// The filter's half width in input samples, `to` and `from` reduced.
int64_t half_width(int64_t from, int64_t to) {
  const double base = static_cast<double>(std::min(from, to)) * kRolloff;
  return static_cast<int64_t>(std::ceil(kZeroCrossings * static_cast<double>(from) / base));
}

// One kernel per output phase: [to, 1, 2·width + from] fp32, `to` and `from` reduced.
at::Tensor sinc_kernels(int64_t from, int64_t to, int64_t* width) {
  const double base = static_cast<double>(std::min(from, to)) * kRolloff;
  *width = half_width(from, to);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor idx = at::arange(-*width, *width + from, f64).view({1, 1, -1}) / static_cast<double>(from);
  at::Tensor t = at::arange(0, -to, -1, f64).view({-1, 1, 1}) / static_cast<double>(to) + idx;
  t = (t * base).clamp(-kZeroCrossings, kZeroCrossings);
  const at::Tensor window = at::cos(t * (M_PI / kZeroCrossings / 2.0)).pow(2);
  t = t * M_PI;
  const at::Tensor sinc = at::where(t == 0, at::ones_like(t), at::sin(t) / t);
  return (sinc * window * (base / static_cast<double>(from))).to(at::kFloat);
}

void check_rates(int64_t from, int64_t to) {
  if (from <= 0 || to <= 0) {
    throw Error(ErrorKind::kInvalidArgument, "resampling from " + std::to_string(from) + " Hz to " +
                                                 std::to_string(to) + " Hz: both rates must be positive");
  }
}

}  // namespace

int64_t resampled_length(int64_t samples, int64_t from, int64_t to) {
  check_rates(from, to);
  const int64_t g = std::gcd(from, to);
  from /= g;
  to /= g;
  return (samples * to + from - 1) / from;
}

int64_t resample_kernel_elements(int64_t from, int64_t to) {
  check_rates(from, to);
  const int64_t g = std::gcd(from, to), f = from / g, t = to / g;
  return t * (2 * half_width(f, t) + f);
}

at::Tensor resample(const at::Tensor& wave, int64_t from, int64_t to) {
  check_rates(from, to);
  at::Tensor x = wave.to(at::kCPU, at::kFloat);
  if (from == to) return x;
  const int64_t g = std::gcd(from, to), length = x.size(1);
  const int64_t f = from / g, t = to / g;
  int64_t width = 0;
  const at::Tensor kernels = sinc_kernels(f, t, &width);
  x = at::constant_pad_nd(x, {width, width + f}, 0.0).unsqueeze(1);  // [C, 1, N + 2w + f]
  const at::Tensor y = at::conv1d(x, kernels, {}, /*stride=*/f);     // [C, t, frames]
  return y.transpose(1, 2)
      .reshape({x.size(0), -1})
      .narrow(1, 0, resampled_length(length, from, to))
      .contiguous();
}

}  // namespace h3::audio
