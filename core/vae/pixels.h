// The pixel processor (docs/h3-model.md §7.5): the decoder's ImageNet-normalised RGB
// to [0, 1] RGB frames and to uint8 frames, cropped to the requested size.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace h3::vae {

// Decoded pixels [3, n, H, W] (ImageNet-normalised) -> [n, height, width, 3] fp32 in [0, 1],
// contiguous: the top-left height x width crop, x * std + mean per channel, clamped.
at::Tensor to_unit_rgb(const at::Tensor& decoded, int64_t height, int64_t width);

// [0, 1] frames -> uint8 frames of the same shape: round(x * 255), computed in fp32
// (rounding in half precision flips borderline pixels).
at::Tensor quantize_u8(const at::Tensor& unit_rgb);

// Both of the above in one pass (what the decoder emits per chunk): `u8` always, `unit` only
// when `keep_unit` (else undefined). The same fp32 operations in the same order, so the frames
// are bit for bit those of quantize_u8(to_unit_rgb(...)).
struct Pixels {
  at::Tensor unit;  // [n, height, width, 3] fp32, when asked for
  at::Tensor u8;    // [n, height, width, 3] uint8
};
Pixels to_pixels(const at::Tensor& decoded, int64_t height, int64_t width, bool keep_unit);

}  // namespace h3::vae
