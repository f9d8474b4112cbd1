#include "vae/attention_inputs.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>

namespace h3::vae {
namespace {

// One head's row: dst = rope(src / rms(src)).
inline void norm_rope_row(const float* src, float* dst, int64_t hd, int64_t rd, const float* cos,
                          const float* sin, float eps) {
  float ss = 0;
  for (int64_t i = 0; i < hd; ++i) ss += src[i] * src[i];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(hd) + eps);
  const int64_t half = rd / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float x1 = src[i] * inv, x2 = src[i + half] * inv;
    dst[i] = x1 * cos[i] - x2 * sin[i];
    dst[i + half] = x2 * cos[i + half] + x1 * sin[i + half];
  }
  for (int64_t i = rd; i < hd; ++i) dst[i] = src[i] * inv;
}

at::Tensor as_heads(const at::Tensor& rows, int64_t s, int64_t heads,
                    int64_t hd) {  // [S, H*hd] -> [1, H, S, hd]
  return rows.view({s, heads, hd}).permute({1, 0, 2}).unsqueeze(0);
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

AttentionInputs attention_inputs(const at::Tensor& qkv, int64_t heads, int64_t head_dim,
                                 const at::Tensor& cos, const at::Tensor& sin, double eps) {
  const int64_t s = qkv.size(0), d = heads * head_dim, rd = cos.size(-1);
  AttentionInputs r;
  r.v = as_heads(qkv.narrow(1, 2 * d, d), s, heads, head_dim);
  const bool fused = qkv.is_cpu() && qkv.scalar_type() == at::kFloat && qkv.is_contiguous() &&
                     cos.scalar_type() == at::kFloat && cos.is_contiguous() && sin.is_contiguous() &&
                     rd % 2 == 0 && rd <= head_dim;
  if (!fused) {
    // [S, H, hd] -> [H, S, hd] rows; cos/sin [S, rd] broadcast over heads.
    const at::Tensor c = cos.unsqueeze(0), sn = sin.unsqueeze(0);
    r.q = norm_rope_aten(as_heads(qkv.narrow(1, 0, d), s, heads, head_dim), c, sn, eps);
    r.k = norm_rope_aten(as_heads(qkv.narrow(1, d, d), s, heads, head_dim), c, sn, eps);
    return r;
  }
  at::Tensor q = at::empty({s, d}, qkv.options()), k = at::empty({s, d}, qkv.options());
  const float* src = qkv.data_ptr<float>();
  const float *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>();
  const auto epsf = static_cast<float>(eps);
  at::parallel_for(0, s, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* row = src + i * 3 * d;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t off = h * head_dim;
        norm_rope_row(row + off, qp + i * d + off, head_dim, rd, cp + i * rd, sp + i * rd, epsf);
        norm_rope_row(row + d + off, kp + i * d + off, head_dim, rd, cp + i * rd, sp + i * rd, epsf);
      }
    }
  });
  r.q = as_heads(q, s, heads, head_dim);
  r.k = as_heads(k, s, heads, head_dim);
  return r;
}

}  // namespace h3::vae
