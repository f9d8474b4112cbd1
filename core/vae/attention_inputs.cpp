#include "vae/attention_inputs.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstring>

namespace h3::vae {
namespace {

// One head's row: dst = rope(src / rms(src)). The sum of squares runs in 8 interleaved partial
// sums, which the compiler keeps in vector registers (a single running sum is a serial chain of
// dependent adds, and this pass ran as long as the RMS norm kernels of the whole block).
inline void norm_rope_row(const float* __restrict src, float* __restrict dst, int64_t hd, int64_t rd,
                          const float* __restrict cos, const float* __restrict sin, float eps) {
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= hd; i += 8) {
    for (int j = 0; j < 8; ++j) part[j] += src[i + j] * src[i + j];
  }
  float ss = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
  for (; i < hd; ++i) ss += src[i] * src[i];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(hd) + eps);
  const int64_t half = rd / 2;
  for (int64_t j = 0; j < half; ++j) {
    const float x1 = src[j] * inv, x2 = src[j + half] * inv;
    dst[j] = x1 * cos[j] - x2 * sin[j];
    dst[j + half] = x2 * cos[j + half] + x1 * sin[j + half];
  }
  for (int64_t j = rd; j < hd; ++j) dst[j] = src[j] * inv;
}

// The same maths in ATen ops (CUDA, bf16).
at::Tensor norm_rope_aten(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, double eps) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor n = xf * at::rsqrt(xf.pow(2).mean(-1, true) + eps);
  const int64_t rd = cos.size(-1);
  if (rd == 0) return n.to(x.scalar_type());
  const at::Tensor xr = n.narrow(-1, 0, rd);
  const at::Tensor x1 = xr.narrow(-1, 0, rd / 2), x2 = xr.narrow(-1, rd / 2, rd / 2);
  at::Tensor rotated = xr * cos + at::cat({-x2, x1}, -1) * sin;
  if (rd < x.size(-1)) rotated = at::cat({rotated, n.narrow(-1, rd, x.size(-1) - rd)}, -1);
  return rotated.to(x.scalar_type());
}

}  // namespace

at::Tensor as_heads(const at::Tensor& rows, int64_t heads, int64_t head_dim) {
  return rows.view({rows.size(0), heads, head_dim}).permute({1, 0, 2}).unsqueeze(0);
}

void attention_inputs_into(const at::Tensor& qkv, int64_t heads, int64_t head_dim, const at::Tensor& cos,
                           const at::Tensor& sin, double eps, const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v) {
  const int64_t s = qkv.size(0), d = heads * head_dim, rd = cos.size(-1);
  const bool fused = qkv.is_cpu() && qkv.scalar_type() == at::kFloat && qkv.is_contiguous() &&
                     cos.scalar_type() == at::kFloat && cos.is_contiguous() && sin.is_contiguous() &&
                     rd % 2 == 0 && rd <= head_dim && q.scalar_type() == at::kFloat && q.is_contiguous() &&
                     k.scalar_type() == at::kFloat && k.is_contiguous() && v.scalar_type() == at::kFloat &&
                     v.is_contiguous();
  if (!fused) {
    // [n, H, hd] rows; cos/sin [n, rd] broadcast over heads.
    const at::Tensor c = cos.unsqueeze(1), sn = sin.unsqueeze(1);
    q.copy_(norm_rope_aten(qkv.narrow(1, 0, d).view({s, heads, head_dim}), c, sn, eps).reshape({s, d}));
    k.copy_(norm_rope_aten(qkv.narrow(1, d, d).view({s, heads, head_dim}), c, sn, eps).reshape({s, d}));
    v.copy_(qkv.narrow(1, 2 * d, d));
    return;
  }
  const float* src = qkv.data_ptr<float>();
  const float *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  const auto epsf = static_cast<float>(eps);
  at::parallel_for(0, s, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* row = src + i * 3 * d;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t off = h * head_dim;
        norm_rope_row(row + off, qp + i * d + off, head_dim, rd, cp + i * rd, sp + i * rd, epsf);
        norm_rope_row(row + d + off, kp + i * d + off, head_dim, rd, cp + i * rd, sp + i * rd, epsf);
      }
      std::memcpy(vp + i * d, row + 2 * d, static_cast<size_t>(d) * sizeof(float));
    }
  });
}

}  // namespace h3::vae
