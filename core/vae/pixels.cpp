#include "vae/pixels.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdint>

namespace h3::vae {
namespace {

// ImageNet statistics, channel-last to match the [n, H, W, 3] layout.
const double kMean[3] = {0.485, 0.456, 0.406};
const double kStd[3] = {0.229, 0.224, 0.225};

// x * std + mean, clamped to [0, 1], as ATen's fp32 mul, add_ and clamp_ compute it (a NaN
// stays NaN, as clamp_ leaves it).
inline float unit_value(float x, float std, float mean) {
  float v = x * std;
  v = v + mean;
  v = v < 0.0f ? 0.0f : v;
  return v > 1.0f ? 1.0f : v;
}

// round(x * 255) to uint8 as quantize_u8 computes it: fp32 product, round half to even. Adding and
// subtracting 1.5 * 2^23 rounds to an integer in the current (nearest-even) mode for |v| < 2^22,
// as nearbyint does, without a libm call per value (the baseline x86-64 build has no roundps).
inline uint8_t u8_value(float unit) {
  constexpr float kRound = 12582912.0f;
  const float v = unit * 255.0f;
  return static_cast<uint8_t>((v + kRound) - kRound);
}

}  // namespace

at::Tensor to_unit_rgb(const at::Tensor& decoded, int64_t height, int64_t width) {
  const at::Tensor crop = decoded.narrow(2, 0, height).narrow(3, 0, width).permute({1, 2, 3, 0});
  const auto opt = crop.options().dtype(at::kFloat);
  const at::Tensor mean = at::tensor(at::ArrayRef<double>(kMean, 3), opt);
  const at::Tensor std = at::tensor(at::ArrayRef<double>(kStd, 3), opt);
  // The same operations in the same order, into one channel-last buffer: a fresh buffer per step
  // (and a last permuting copy) cost more in page faults than the arithmetic.
  at::Tensor out = at::empty(crop.sizes(), opt);
  at::mul_out(out, crop.to(at::kFloat), std);
  return out.add_(mean).clamp_(0.0, 1.0);
}

at::Tensor quantize_u8(const at::Tensor& unit_rgb) {
  return unit_rgb.mul(255.0).round_().to(at::kByte);
}

Pixels to_pixels(const at::Tensor& decoded, int64_t height, int64_t width, bool keep_unit) {
  Pixels p;
  // One pass on the CPU for fp32 rows (the decoder's own output and its narrows and blends):
  // the ATen ops make five passes and a fresh [n, H, W, 3] fp32 temporary for the product by 255,
  // and read the channel-first input through a permuted (channel-strided) view.
  const bool fused = decoded.is_cpu() && decoded.scalar_type() == at::kFloat && decoded.dim() == 4 &&
                     decoded.size(0) == 3 && decoded.stride(3) == 1;
  if (!fused) {
    p.unit = to_unit_rgb(decoded, height, width);
    p.u8 = quantize_u8(p.unit);
    if (!keep_unit) p.unit = at::Tensor();
    return p;
  }
  const int64_t n = decoded.size(1);
  p.u8 = at::empty({n, height, width, 3}, decoded.options().dtype(at::kByte));
  if (keep_unit) p.unit = at::empty({n, height, width, 3}, decoded.options());
  const float* src = decoded.data_ptr<float>();
  const int64_t sc = decoded.stride(0), sf = decoded.stride(1), sy = decoded.stride(2);
  uint8_t* u8 = p.u8.data_ptr<uint8_t>();
  float* unit = keep_unit ? p.unit.data_ptr<float>() : nullptr;
  float sd[3], mn[3];
  for (int c = 0; c < 3; ++c) {
    sd[c] = static_cast<float>(kStd[c]);
    mn[c] = static_cast<float>(kMean[c]);
  }
  // One output row (frame f, row y) per step.
  at::parallel_for(0, n * height, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t f = r / height, y = r % height;
      const float* s0 = src + f * sf + y * sy;
      const float* s1 = s0 + sc;
      const float* s2 = s1 + sc;
      uint8_t* q = u8 + r * width * 3;
      float* u = unit ? unit + r * width * 3 : nullptr;
      for (int64_t x = 0; x < width; ++x) {
        const float a = unit_value(s0[x], sd[0], mn[0]), b = unit_value(s1[x], sd[1], mn[1]),
                    c = unit_value(s2[x], sd[2], mn[2]);
        q[3 * x] = u8_value(a);
        q[3 * x + 1] = u8_value(b);
        q[3 * x + 2] = u8_value(c);
        if (u) {
          u[3 * x] = a;
          u[3 * x + 1] = b;
          u[3 * x + 2] = c;
        }
      }
    }
  });
  return p;
}

}  // namespace h3::vae
