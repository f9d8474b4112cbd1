#include "vae/vit_decoder.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <utility>
#include <vector>

#include "common/cpu_attention.h"
#include "common/fused_linear.h"
#include "common/parallel_tasks.h"
#include "common/row_norm.h"
#include "common/shape.h"
#include "h3/error.h"
#include "vae/attention_inputs.h"
#include "vae/decoder_tensors.h"

namespace h3::vae {
namespace {

// Loads one tensor as contiguous fp32 on CPU and checks its shape.
at::Tensor fetch(const std::function<at::Tensor(const std::string&)>& get, const std::string& name,
                 std::vector<int64_t> expected) {
  at::Tensor t = get(name);
  if (!t.defined()) throw Error(ErrorKind::kNotFound, "video VAE weights: tensor '" + name + "' is missing");
  if (!at::isFloatingType(t.scalar_type())) {
    throw Error(ErrorKind::kMismatch,
                "video VAE weights: tensor '" + name + "' is not a floating-point tensor");
  }
  if (t.sizes() != at::IntArrayRef(expected)) {
    throw Error(ErrorKind::kMismatch, "video VAE weights: tensor '" + name + "' has shape " +
                                          shape_string(t.sizes()) + " but the config needs " +
                                          shape_string(expected) + " (config and checkpoint disagree)");
  }
  return t.to(at::kCPU, at::kFloat).contiguous();
}

// cos/sin tables [S, rope_dim] for a tile of t x h x w patches followed by `suffix`
// tokens at position (0, 0, 0). Per axis, f = rope_dim / 6 frequencies theta^(-k/f)
// times 2*pi times the tile-local coordinate; the three axes are concatenated (t, h, w)
// and the result duplicated for rotate-half.
std::pair<at::Tensor, at::Tensor> rope_tables(const VaeConfig& c, int64_t t, int64_t h, int64_t w,
                                              int64_t suffix) {
  const int64_t rd = c.rope_dim();
  const int64_t f = rd / 6;
  const auto fopt = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor k = at::arange(f, at::TensorOptions().dtype(at::kDouble));
  const at::Tensor inv = at::pow(c.rope_theta, -k / static_cast<double>(f)).to(at::kFloat);
  auto coords = [&](int64_t n) { return (at::arange(n, fopt) + 0.5) / static_cast<double>(n) * 2.0 - 1.0; };
  const at::Tensor ct = coords(t).view({t, 1, 1}).expand({t, h, w});
  const at::Tensor ch = coords(h).view({1, h, 1}).expand({t, h, w});
  const at::Tensor cw = coords(w).view({1, 1, w}).expand({t, h, w});
  at::Tensor pos = at::stack({ct, ch, cw}, -1).reshape({t * h * w, 3});
  pos = at::cat({pos, at::zeros({suffix, 3}, fopt)}, 0);  // registers + zero token at (0, 0, 0)
  at::Tensor ang = (pos.unsqueeze(-1) * inv.view({1, 1, f})) * (2.0 * M_PI);  // [S, 3, f]
  ang = ang.reshape({pos.size(0), 3 * f});
  ang = at::cat({ang, ang}, -1);  // [S, rd]
  return {ang.cos(), ang.sin()};
}

// Rows per band of the row-wise part of a block on the CPU (decode_tile). The GEMMs want tall
// bands: oneDNN's AVX2 kernels lose 1-5 % at 900 rows and 8-17 % at 450 against a whole
// 1797-row sequence (its AVX-512 kernels gain about 10 % at either); the allocator wants short
// ones. 1024 gives the medium model's 1797-row tiles 2 bands of about 900 rows.
constexpr int64_t kBandRows = 1024;

// [0, n) in bands of at most `most` rows, of even size: (first row, rows).
std::vector<std::pair<int64_t, int64_t>> row_bands(int64_t n, int64_t most) {
  const int64_t count = std::max<int64_t>(1, (n + most - 1) / std::max<int64_t>(most, 1));
  std::vector<std::pair<int64_t, int64_t>> r;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t a = n * i / count, b = n * (i + 1) / count;
    if (b > a) r.emplace_back(a, b - a);
  }
  return r;
}

// The layer scales folded into the projections that feed the residual stream, so that one fused
// linear + add computes x + (o W^T + b) * scale (what the checkpoint's blocks do).
void fold_layer_scales(BlockWeights& b) {
  b.out_weight = b.out_weight * b.scale1.unsqueeze(1);
  b.out_bias = b.out_bias * b.scale1;
  b.ff_out_weight = b.ff_out_weight * b.scale2.unsqueeze(1);
  b.ff_out_bias = b.ff_out_bias * b.scale2;
}

// RMSNorm of a band's rows: one pass per row on the CPU in fp32 (common/row_norm.h), else ATen's.
at::Tensor rms_norm_band(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return row_norm_applies(x, weight) ? rms_norm_rows(x, weight, eps)
                                     : at::rms_norm(x, {x.size(-1)}, weight, eps);
}

}  // namespace

DecoderWeights bind_decoder_weights(const VaeConfig& c,
                                    const std::function<at::Tensor(const std::string&)>& get) {
  DecoderWeights w;
  w.blocks.resize(static_cast<size_t>(c.num_layers));
  for (const DecoderTensor& d : decoder_tensors(c)) d.store(w, fetch(get, d.name, d.shape));
  for (BlockWeights& b : w.blocks) fold_layer_scales(b);
  return w;
}

namespace {

// Query rows per attention task on the CPU: the fused kernel then takes them in its own blocks of
// 256 (of 64 in a last, shorter block).
constexpr int64_t kAttentionRows = 768;

// softmax(q kᵀ / √hd) v of a tile's rows, q, k, v [S, H * hd] -> [S, H * hd]. On the CPU the path
// the CPU's kernel choice gives the DiT (common/cpu_kernels.h): the oneDNN GEMM blocks where
// LibTorch's fused kernel is not at home (its GEMMs MKL's, at half oneDNN's rate on an AMD
// CPU), else the fused kernel, one call per (head, block of kAttentionRows query rows) against
// all keys. Either way the intra-op threads share the calls and each runs its own on one thread
// (run_tasks): no GEMM is split between threads, so a tile's bits do not depend on the thread
// count (the ranks of one world, which decode their tiles at different counts, agree).
at::Tensor tile_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t H,
                          int64_t hd) {
  const int64_t S = q.size(0);
  if (q.is_cpu()) {
    const at::Tensor q3 = q.view({S, H, hd}), k3 = k.view({S, H, hd}), v3 = v.view({S, H, hd});
    if (cpu_attention_applies(q3, k3, v3)) return cpu_attention(q3, k3, v3, kAttentionScoreElements);
  }
  if (!q.is_cpu()) {
    // [1, H, S, hd] -> [S, D]: the output is laid out [S, H, hd] already.
    return at::scaled_dot_product_attention(as_heads(q, H, hd), as_heads(k, H, hd), as_heads(v, H, hd))
        .squeeze(0)
        .transpose(0, 1)
        .reshape({S, H * hd});
  }
  const at::Tensor o = at::empty({S, H * hd}, q.options());
  const int64_t blocks = (S + kAttentionRows - 1) / kAttentionRows;
  run_tasks(H * blocks, [&](int64_t task) {
    const int64_t h = task / blocks, r0 = (task % blocks) * kAttentionRows,
                  n = std::min(kAttentionRows, S - r0);
    // Head h's rows r0 .. r0 + n as [1, 1, n, hd] (a view with q's row stride).
    auto head = [&](const at::Tensor& t, int64_t first, int64_t rows) {
      return t.narrow(0, first, rows).narrow(1, h * hd, hd).unsqueeze(0).unsqueeze(0);
    };
    o.narrow(0, r0, n)
        .narrow(1, h * hd, hd)
        .copy_(at::scaled_dot_product_attention(head(q, r0, n), head(k, 0, S), head(v, 0, S))
                   .squeeze(0)
                   .squeeze(0));
  });
  return o;
}

}  // namespace

at::Tensor decode_tile(const VaeConfig& c, const DecoderWeights& w, const at::Tensor& latent_tile) {
  at::Tensor z = latent_tile.dim() == 5 ? latent_tile.squeeze(0) : latent_tile;
  if (z.dim() != 4 || z.size(0) != c.latent_channels) {
    throw Error(ErrorKind::kInternal, "decode_tile: expected a latent tile [C, t, h, w]");
  }
  z = z.to(w.proj_in_weight.device(), at::kFloat);  // the weights' device (VideoDecoder::to)
  const int64_t t = z.size(1), h = z.size(2), wd = z.size(3);
  const int64_t n = t * h * wd, D = c.dim(), H = c.num_heads, hd = c.head_dim, F = c.ffn_inner();
  const int64_t R = c.num_register_tokens, suffix = R + 1;
  const int64_t S = n + suffix;

  // Tokens in (t, h, w) order; post_quant_conv is a 1x1x1 conv, i.e. a per-token linear map.
  at::Tensor tokens = z.permute({1, 2, 3, 0}).reshape({n, c.latent_channels});
  tokens = h3::linear(tokens, w.post_quant_conv_weight, w.post_quant_conv_bias);
  // [S, D], updated in place band by band below (a fresh tensor, no one else holds it).
  at::Tensor x = at::cat({h3::linear(tokens, w.proj_in_weight, w.proj_in_bias), w.register_tokens,
                          at::zeros({1, D}, tokens.options())},
                         0);

  const auto tables = rope_tables(c, t, h, wd, suffix);
  const at::Tensor cos = tables.first.to(x.device()), sin = tables.second.to(x.device());
  // Everything but the attention itself is row-wise, so on the CPU it runs band by band
  // (row_bands): a band's projection, FFN halves and residual sums are a fraction of the
  // whole-sequence temporaries (the FFN's two [S, F] halves, the [S, 3D] projection), which glibc
  // gave back to the kernel at the end of every layer (heap trim) and the next layer page-faulted
  // in again.
  // q, k and v are the tile's own buffers, written band by band and read whole by the attention.
  const std::vector<std::pair<int64_t, int64_t>> bands = row_bands(S, x.is_cpu() ? kBandRows : S);
  const at::Tensor q = at::empty({S, D}, x.options()), k = at::empty({S, D}, x.options()),
                   v = at::empty({S, D}, x.options());
  for (const BlockWeights& b : w.blocks) {
    for (const auto& [r0, rows] : bands) {
      const at::Tensor a = rms_norm_band(x.narrow(0, r0, rows), b.norm1_weight, c.norm_eps);
      attention_inputs_into(h3::linear(a, b.qkv_weight, b.qkv_bias), H, hd, cos.narrow(0, r0, rows),
                            sin.narrow(0, r0, rows), c.norm_eps, q.narrow(0, r0, rows), k.narrow(0, r0, rows),
                            v.narrow(0, r0, rows));
    }
    const at::Tensor o = tile_attention(q, k, v, H, hd);
    for (const auto& [r0, rows] : bands) {
      const at::Tensor xr = x.narrow(0, r0, rows);
      // x + attn * scale1 (folded), then x + ffn * scale2 (folded), written back into x's rows.
      const at::Tensor y = h3::linear_add(o.narrow(0, r0, rows), b.out_weight, b.out_bias, xr);
      const at::Tensor m = rms_norm_band(y, b.norm2_weight, c.norm_eps);
      // ff.net.0.proj rows are [value; gate]: silu(gate) * value, each product fused into its GEMM.
      const at::Tensor gate =
          h3::linear_silu(m, b.ff_in_weight.narrow(0, F, F), b.ff_in_bias.narrow(0, F, F));
      const at::Tensor act =
          h3::linear_mul(m, b.ff_in_weight.narrow(0, 0, F), b.ff_in_bias.narrow(0, 0, F), gate);
      xr.copy_(h3::linear_add(act, b.ff_out_weight, b.ff_out_bias, y));
    }
  }
  // The suffix tokens carry no pixels: they are dropped before the output head. The head and the
  // unpatchify (each token to [3, 4, 16, 16]: channel, frame, row, column) go by latent frames, a
  // band's pixels written straight into their place in the output (no [n, 3 * 4 * 16 * 16]
  // projection of the whole tile, no second copy for the unpatchify).
  const int64_t oc = c.out_channels, pt = c.patch_size_t, p = c.patch_size;
  const at::Tensor out = at::empty({oc, t * pt, h * p, wd * p}, x.options());
  const int64_t per_frame = h * wd;
  const int64_t frames_per_band = x.is_cpu() ? std::max<int64_t>(1, kBandRows / per_frame) : t;
  for (int64_t t0 = 0; t0 < t; t0 += frames_per_band) {
    const int64_t nt = std::min(frames_per_band, t - t0);
    const at::Tensor xn = at::layer_norm(x.narrow(0, t0 * per_frame, nt * per_frame), {D}, w.norm_out_weight,
                                         w.norm_out_bias, c.norm_eps);
    const at::Tensor px = h3::linear(xn, w.proj_out_weight, w.proj_out_bias);  // [nt*h*w, C*pt*p*p]
    out.narrow(1, t0 * pt, nt * pt)
        .view({oc, nt, pt, h, p, wd, p})
        .copy_(px.view({nt, h, wd, oc, pt, p, p}).permute({3, 0, 4, 1, 5, 2, 6}));
  }
  return out;
}

DecoderWeights to_device(const DecoderWeights& w, const c10::Device& device) {
  auto to = [&](const at::Tensor& t) { return t.to(device); };
  DecoderWeights d;
  d.post_quant_conv_weight = to(w.post_quant_conv_weight);
  d.post_quant_conv_bias = to(w.post_quant_conv_bias);
  d.proj_in_weight = to(w.proj_in_weight);
  d.proj_in_bias = to(w.proj_in_bias);
  d.register_tokens = to(w.register_tokens);
  for (const BlockWeights& b : w.blocks) {
    d.blocks.push_back(BlockWeights{to(b.norm1_weight), to(b.qkv_weight), to(b.qkv_bias), to(b.out_weight),
                                    to(b.out_bias), to(b.scale1), to(b.norm2_weight), to(b.ff_in_weight),
                                    to(b.ff_in_bias), to(b.ff_out_weight), to(b.ff_out_bias), to(b.scale2)});
  }
  d.norm_out_weight = to(w.norm_out_weight);
  d.norm_out_bias = to(w.norm_out_bias);
  d.proj_out_weight = to(w.proj_out_weight);
  d.proj_out_bias = to(w.proj_out_bias);
  return d;
}

}  // namespace h3::vae
