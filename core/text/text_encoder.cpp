#include "text/text_encoder.h"

#include <ATen/ATen.h>
#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/cpu_attention.h"
#include "common/fused_linear.h"
#include "common/shape.h"
#include "dit/tp.h"
#include "h3/error.h"
#include "io/checkpoint.h"
#include "text/checkpoint_tensor.h"

#if __has_include(<ATen/ops/scaled_dot_product_attention.h>)
#define H3_HAVE_FUSED_SDPA 1
#else
#define H3_HAVE_FUSED_SDPA 0
#endif

namespace h3::text {
namespace {

// The attention scores held at once per block of queries (per thread in the CPU's GEMM blocks):
// 16 MiB of fp32, as the DiT's.
constexpr int64_t kScoreElements = int64_t(1) << 22;

// Reads one tensor (or this rank's part of it) into storage of its own, after checking its full
// shape against the config; in `dtype`, or, with keep_narrower, as stored when it is bf16 or fp16
// and `dtype` is fp32.
at::Tensor read(const io::Checkpoint& ck, const EncoderParameter& p, int rank, int size,
                const EncoderOptions& o, at::ScalarType dtype, bool keep_narrower) {
  const at::Tensor v = rank_part(checked_view(ck, p.name, p.shape, "the text encoder"), p.name, p.shape,
                                 p.split, 1, rank, size);
  const at::ScalarType stored = v.scalar_type();
  const bool narrower =
      keep_narrower && dtype == at::kFloat && (stored == at::kBFloat16 || stored == at::kHalf);
  return owned_copy(v, at::TensorOptions().dtype(narrower ? stored : dtype).device(o.device));
}

// Qwen3's RMSNorm: normalised in fp32, cast back, then scaled by the weight in the input's dtype.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  auto xf = x.to(at::kFloat);
  xf = xf * at::rsqrt(xf.pow(2).mean(-1, true).add_(eps));
  return weight * xf.to(x.scalar_type());
}

at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({x.narrow(-1, half, half).neg(), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

std::pair<at::Tensor, at::Tensor> mrope_cos_sin(const EncoderConfig& c, const at::Tensor& positions) {
  const int64_t half = c.head_dim / 2;
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(positions.device());
  // inv_freq[j] = 1 / theta^(2j / D), as the reference computes it (fp32).
  auto inv = at::pow(c.rope_theta, at::arange(0, c.head_dim, 2, f32.dtype(at::kLong)).to(at::kFloat) /
                                       static_cast<double>(c.head_dim))
                 .reciprocal();
  // The axis each frequency takes its position from.
  std::vector<int64_t> axis(static_cast<size_t>(half), 0);
  for (int64_t j = 0; j < half; ++j) {
    if (c.mrope_interleaved) {
      if (j % 3 == 1 && j < 3 * c.mrope_section[1]) axis[j] = 1;
      if (j % 3 == 2 && j < 3 * c.mrope_section[2]) axis[j] = 2;
    } else {
      axis[j] = j < c.mrope_section[0] ? 0 : j < c.mrope_section[0] + c.mrope_section[1] ? 1 : 2;
    }
  }
  auto pos = positions.to(at::kFloat);                        // [3, L]
  auto per_axis = pos.unsqueeze(2) * inv.view({1, 1, half});  // [3, L, half]
  auto idx = at::tensor(axis, at::TensorOptions().dtype(at::kLong)).to(pos.device());
  auto freqs = per_axis.gather(0, idx.view({1, 1, half}).expand({1, pos.size(1), half})).squeeze(0);
  auto emb = at::cat({freqs, freqs}, -1);  // [L, D]
  return {emb.cos(), emb.sin()};
}

at::Tensor causal_gqa_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t L = q.size(0), heads = q.size(1), d = q.size(2), group = heads / k.size(1);
  auto kh = (group == 1 ? k : k.repeat_interleave(group, 1)).transpose(0, 1);  // [heads, L, D]
  auto vh = (group == 1 ? v : v.repeat_interleave(group, 1)).transpose(0, 1);
  auto qh = q.transpose(0, 1);
  if (cpu_attention_applies(q, kh.transpose(0, 1), vh.transpose(0, 1))) {
    // The CPU's kernel choice (common/cpu_kernels.h): the GEMM blocks where the fused kernel is
    // not at home (outside Intel's AVX-512 CPUs in fp32, bf16 without AMX).
    return cpu_causal_attention(q, kh.transpose(0, 1), vh.transpose(0, 1), kScoreElements);
  }
#if H3_HAVE_FUSED_SDPA
  auto o = at::scaled_dot_product_attention(qh.unsqueeze(0), kh.unsqueeze(0), vh.unsqueeze(0), {}, 0.0,
                                            /*is_causal=*/true);
  return o.squeeze(0).transpose(0, 1).reshape({L, heads * d});
#else
  // Blocks of queries, each against the keys up to its last row, so the fp32 score buffer stays
  // bounded (about 16 MiB) for long prompts.
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto qf = qh.to(at::kFloat).mul(scale), kf = kh.to(at::kFloat), vf = vh.to(at::kFloat);
  auto out = at::empty({heads, L, d}, qf.options());
  const int64_t block = std::max<int64_t>(16, kScoreElements / std::max<int64_t>(1, heads * L));
  for (int64_t i0 = 0; i0 < L; i0 += block) {
    const int64_t b = std::min(block, L - i0), keys = i0 + b;
    auto scores = at::bmm(qf.narrow(1, i0, b), kf.narrow(1, 0, keys).transpose(1, 2));  // [heads, b, keys]
    // Query i0 + r sees keys 0..i0 + r.
    auto rows = at::arange(i0, i0 + b, at::TensorOptions().dtype(at::kLong)).view({b, 1});
    auto cols = at::arange(keys, at::TensorOptions().dtype(at::kLong)).view({1, keys});
    scores.masked_fill_((cols > rows).unsqueeze(0), -std::numeric_limits<float>::infinity());
    out.narrow(1, i0, b).copy_(at::bmm(at::softmax(scores, -1), vf.narrow(1, 0, keys)));
  }
  return out.transpose(0, 1).reshape({L, heads * d}).to(q.scalar_type());
#endif
}

TextEncoder TextEncoder::load(const std::string& dir, int64_t layer, dist::Group* group,
                              const EncoderOptions& o) {
  TextEncoder e;
  e.dir_ = dir;
  e.k_ = layer;
  e.config_ = EncoderConfig::load(dir);
  const EncoderConfig& c = e.config_;
  const std::string origin = dir + "/config.json";
  if (layer < 1 || layer >= c.num_layers) {
    throw Error(ErrorKind::kInvalidArgument,
                "conditioning layer K = " + std::to_string(layer) + " is outside 1.." +
                    std::to_string(c.num_layers - 1) + " for the " + std::to_string(c.num_layers) +
                    "-layer text encoder of " + dir +
                    " (hidden_states[K] is the output of layers 0..K-1; K must be smaller than the layer "
                    "count): set text_encoder_layer in model_index.json or --layer");
  }
  const dit::TensorParallel tp(group);
  c.check_tp(tp.size(), origin);
  e.group_ = group;
  e.tp_rank_ = tp.rank();
  e.tp_size_ = tp.size();
  const at::ScalarType dtype = o.dtype.value_or(o.device.is_cuda() ? at::kBFloat16 : at::kFloat);

  e.dtype_ = dtype;
  const io::Checkpoint ck = io::Checkpoint::open(dir);
  e.weights_.layers.resize(static_cast<size_t>(layer));
  declare_encoder_parameters(c, e.weights_, [&](const EncoderParameter& p, at::Tensor& slot) {
    // embed_tokens stays as stored when that is narrower than the compute dtype: a prompt reads a
    // few of its rows, converted on lookup (exactly: bf16 and fp16 widen to fp32 without
    // rounding). In fp32 that halves the largest tensor: 1.56 GB fewer for the release's
    // 151936 x 5120, 78 MB for the medium test model's.
    slot = read(ck, p, tp.rank(), tp.size(), o, dtype, &slot == &e.weights_.embed_tokens);
  });
  return e;
}

at::Tensor TextEncoder::forward(const at::Tensor& ids, const at::Tensor& positions,
                                std::vector<at::Tensor>* all) const {
  return run(ids, positions, nullptr, all);
}

at::Tensor TextEncoder::forward(const at::Tensor& ids, const at::Tensor& positions, const VisualRows& visual,
                                std::vector<at::Tensor>* all) const {
  const int64_t L = ids.numel();
  if (!visual.mask.defined() || visual.mask.numel() != L || visual.mask.scalar_type() != at::kBool) {
    throw Error(ErrorKind::kInvalidArgument, "text encoder: the visual rows' mask must be bool [" +
                                                 std::to_string(L) + "] (one per token)");
  }
  const int64_t n = visual.mask.sum().item<int64_t>();
  auto fits = [&](const at::Tensor& t) {
    return t.defined() && t.dim() == 2 && t.size(0) == n && t.size(1) == config_.hidden_size;
  };
  if (!fits(visual.embeds)) {
    throw Error(
        ErrorKind::kInvalidArgument,
        "text encoder: " + std::to_string(n) + " image tokens need visual embeddings [" + std::to_string(n) +
            ", " + std::to_string(config_.hidden_size) + "], got " +
            (visual.embeds.defined() ? shape_string(visual.embeds.sizes().vec()) : std::string("none")));
  }
  for (const auto& d : visual.deepstack) {
    if (!fits(d))
      throw Error(ErrorKind::kInvalidArgument,
                  "text encoder: a deepstack feature does not match the image tokens");
  }
  if (visual.deepstack.size() > weights_.layers.size()) {
    throw Error(ErrorKind::kInvalidArgument, "text encoder: " + std::to_string(visual.deepstack.size()) +
                                                 " deepstack features for " +
                                                 std::to_string(weights_.layers.size()) + " loaded layers");
  }
  return run(ids, positions, &visual, all);
}

at::Tensor TextEncoder::run(const at::Tensor& ids_in, const at::Tensor& positions, const VisualRows* visual,
                            std::vector<at::Tensor>* all) const {
  const at::Tensor& embed_tokens = weights_.embed_tokens;
  if (!embed_tokens.defined()) {
    throw Error(ErrorKind::kInvalidArgument, dir_ + ": the text encoder's weights were released");
  }
  const EncoderConfig& c = config_;
  const int64_t L = ids_in.numel();
  if (L == 0) {
    throw Error(ErrorKind::kInvalidArgument,
                "the prompt gives no tokens (it is empty): an empty prompt cannot condition the model; give "
                "some text");
  }
  if (positions.dim() != 2 || positions.size(0) != 3 || positions.size(1) != L) {
    throw Error(ErrorKind::kInvalidArgument, "text encoder: positions must be [3, " + std::to_string(L) +
                                                 "], got " + shape_string(positions.sizes().vec()));
  }
  const auto dev = embed_tokens.device();
  auto ids = ids_in.reshape({L}).to(at::kCPU, at::kLong);
  const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
  if (lo < 0 || hi >= c.vocab_size) {
    throw Error(ErrorKind::kInvalidArgument, "text encoder: token id " + std::to_string(lo < 0 ? lo : hi) +
                                                 " is outside the vocabulary (0.." +
                                                 std::to_string(c.vocab_size - 1) + ")");
  }
  const dit::TensorParallel tp(group_);
  auto h = embed_tokens.index_select(0, ids.to(dev)).to(dtype_);  // [L, hidden], as stored -> compute
  at::Tensor rows;                                                // the visual rows' indices
  if (visual) {
    rows = visual->mask.reshape({L}).to(at::kCPU).nonzero().view({-1}).to(dev);
    h.index_copy_(0, rows, visual->embeds.to(dev, h.scalar_type()));
  }
  if (all) all->assign(1, h);
  auto [cos, sin] = mrope_cos_sin(c, positions.to(dev));
  cos = cos.to(h.scalar_type()).unsqueeze(1);  // [L, 1, D]: broadcast over heads
  sin = sin.to(h.scalar_type()).unsqueeze(1);
  const int64_t D = c.head_dim;
  for (size_t li = 0; li < weights_.layers.size(); ++li) {
    const auto& w = weights_.layers[li];
    auto x = rms_norm(h, w.input_layernorm, c.rms_norm_eps);
    auto q = rms_norm(h3::linear(x, w.q_proj, {}).view({L, -1, D}), w.q_norm, c.rms_norm_eps);
    auto k = rms_norm(h3::linear(x, w.k_proj, {}).view({L, -1, D}), w.k_norm, c.rms_norm_eps);
    auto v = h3::linear(x, w.v_proj, {}).view({L, -1, D});
    q = q * cos + rotate_half(q) * sin;
    k = k * cos + rotate_half(k) * sin;
    auto a = h3::linear(causal_gqa_attention(q, k, v), w.o_proj, {});
    tp.all_reduce_sum(a);
    h = h + a;
    x = rms_norm(h, w.post_attention_layernorm, c.rms_norm_eps);
    // The CPU's linears (common/fused_linear.h: oneDNN tiles in fp32, and in bf16 where the CPU
    // has it natively), SwiGLU's silu and product fused into the up projection.
    auto m =
        h3::linear(h3::linear_mul(x, w.up_proj, {}, h3::linear_silu(x, w.gate_proj, {})), w.down_proj, {});
    tp.all_reduce_sum(m);
    h = h + m;
    // Deepstack: the vision tower's intermediate features join the image rows after the first
    // layers, for the next layer to read. hidden_states[K], what this returns, is the last layer's
    // output as transformers reports it: before that layer's own addition (which only matters when
    // K is within the deepstack layers, as in the tiny models; `all` keeps the residual stream).
    const at::Tensor added = visual && li < visual->deepstack.size()
                                 ? h.index_add(0, rows, visual->deepstack[li].to(dev, h.scalar_type()))
                                 : h;
    if (all) all->push_back(added);
    if (li + 1 < weights_.layers.size()) h = added;
  }
  return h;
}

at::Tensor TextEncoder::forward(const std::vector<int64_t>& ids) const {
  const int64_t L = static_cast<int64_t>(ids.size());
  auto t = at::tensor(ids, at::TensorOptions().dtype(at::kLong));
  auto positions =
      at::arange(L, at::TensorOptions().dtype(at::kLong)).unsqueeze(0).expand({3, L}).contiguous();
  if (L == 0) t = at::empty({0}, at::kLong);
  return forward(t, positions);
}

Conditioning TextEncoder::encode(const std::vector<int64_t>& ids) const {
  Conditioning out;
  out.embeds = forward(ids).to(at::kCPU, at::kFloat).contiguous();
  out.tags = at::ones({out.embeds.size(0)}, at::TensorOptions().dtype(at::kLong));
  return out;
}

void TextEncoder::use_group(dist::Group* group) {
  const dit::TensorParallel next(group);
  if (next.rank() != tp_rank_ || next.size() != tp_size_) {
    throw Error(ErrorKind::kInternal, dir_ + ": text encoder shards of rank " + std::to_string(tp_rank_) +
                                          " of " + std::to_string(tp_size_) + " cannot serve rank " +
                                          std::to_string(next.rank()) + " of " + std::to_string(next.size()));
  }
  group_ = group;
}

std::vector<std::pair<std::string, at::Tensor>> TextEncoder::named() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  declare_encoder_parameters(config_, weights_, [&](const EncoderParameter& p, const at::Tensor& t) {
    if (t.defined()) out.emplace_back(p.name, t);
  });
  return out;
}

void TextEncoder::release() {
  const bool on_cpu = weights_.embed_tokens.defined() && weights_.embed_tokens.device().is_cpu();
  weights_ = EncoderWeights{};
  // Most CPU weights are blocks under glibc's mmap threshold: freed, they stay in the malloc arenas
  // (the rank thread's, between later allocations) and the resident size hardly moves. Trimming
  // hands their whole pages back to the kernel. (CUDA weights go back to the caching allocator,
  // where the DiT reuses them: that is the point of releasing them there.)
  if (on_cpu) malloc_trim(0);
}

}  // namespace h3::text
