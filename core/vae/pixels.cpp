#include "vae/pixels.h"

#include <ATen/ATen.h>

namespace h3::vae {

at::Tensor to_unit_rgb(const at::Tensor& decoded, int64_t height, int64_t width) {
  // ImageNet statistics, channel-last to match the [n, H, W, 3] layout.
  static const double kMean[3] = {0.485, 0.456, 0.406};
  static const double kStd[3] = {0.229, 0.224, 0.225};
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

}  // namespace h3::vae
