// RMSNorm over the last dimension in one pass per row, with the DiT's work on the normalised
// row done in the same pass: an AdaLN shift/scale of the row's segment, or rotate-half RoPE.
// ATen's CPU rms_norm is a composite (pow, mean, add, rsqrt and two multiplies, each a pass over
// the whole tensor and most of them a fresh tensor), and the modulation and RoPE after it add
// four to six passes more: on the race's DiT those passes were ~12 % of a step (docs/dit.md,
// "CPU kernels"). Here each row is read once for its sum of squares and once more to write the
// result.
//
// The same operations in the same order per element as the composites they replace
// ((x * r) * w, then (y * (1 + scale)) + shift, or y * cos + rot * sin), but the sum of squares
// is taken in another order, so the results differ from ATen's in the last bits. Each row is
// computed by one thread: the bits do not depend on the intra-op thread count (ranks running
// different thread counts agree; common/parallel_tasks.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace h3 {

// Whether the fused kernels take x and weight: both fp32 on the CPU, weight [n] with n = x's
// last dimension. (x need not be contiguous: it is made so.) Otherwise use the composites.
bool row_norm_applies(const at::Tensor& x, const at::Tensor& weight);

// y = x * rsqrt(mean(x^2, -1) + eps) * weight, a new contiguous tensor of x's shape.
at::Tensor rms_norm_rows(const at::Tensor& x, const at::Tensor& weight, double eps);

// Rows [start, start + length) of a 2-D x take `scale` and `shift` ([n] fp32 each).
struct RowAffine {
  int64_t start = 0, length = 0;
  at::Tensor scale, shift;
};
// rms_norm_rows(x), then per span y * (1 + scale) + shift (rows outside every span: unmodulated).
at::Tensor rms_norm_affine_rows(const at::Tensor& x, const at::Tensor& weight, double eps,
                                const std::vector<RowAffine>& spans);

// x [S, heads, D]: rms_norm_rows over D per head, then rotate-half RoPE on the first R dims of
// every head with cos, sin [S, 1, R] (or [S, R]) fp32: y[:R] = y[:R] * cos + rot(y[:R]) * sin,
// rot(v) = [-v[R/2:], v[:R/2]].
at::Tensor rms_norm_rope_rows(const at::Tensor& x, const at::Tensor& weight, double eps,
                              const at::Tensor& cos, const at::Tensor& sin);

}  // namespace h3
