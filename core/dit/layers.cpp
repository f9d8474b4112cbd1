#include "dit/layers.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "common/cpu_attention.h"
#include "common/fused_linear.h"
#include "common/op_profile.h"
#include "common/row_norm.h"
#include "dit/adaln_tables.h"
#include "h3/error.h"

#if __has_include(<ATen/ops/scaled_dot_product_attention.h>)
#define H3_HAVE_FUSED_SDPA 1
#else
#define H3_HAVE_FUSED_SDPA 0
#endif

namespace h3::dit {
namespace {

at::Tensor as_dtype(const at::Tensor& x, const at::Tensor& like) {
  return x.scalar_type() == like.scalar_type() ? x : x.to(like.scalar_type());
}

// x[seg] = x[seg] * (1 + scale[idx]) + shift[idx] for every segment; x is fp32.
void modulate_(at::Tensor& x, const at::Tensor& table, int64_t shift_i, int64_t scale_i,
               const std::vector<Segment>& segs) {
  for (const auto& s : segs) {
    auto rows = x.narrow(0, s.start, s.length);
    auto vecs = table[s.index];
    rows.mul_(vecs[scale_i] + 1.0).add_(vecs[shift_i]);
  }
}

// rms_norm(h) * weight, then modulate_: in one pass per row where the fused kernel takes h
// (common/row_norm.h), else the composites.
at::Tensor norm_modulate(const at::Tensor& h, const at::Tensor& weight, double eps, const at::Tensor& table,
                         int64_t shift_i, int64_t scale_i, const std::vector<Segment>& segs) {
  if (row_norm_applies(h, weight) && table.scalar_type() == at::kFloat && table.device().is_cpu()) {
    std::vector<RowAffine> spans;
    spans.reserve(segs.size());
    for (const auto& s : segs) {
      auto vecs = table[s.index];
      spans.push_back({s.start, s.length, vecs[scale_i], vecs[shift_i]});
    }
    return rms_norm_affine_rows(h, weight, eps, spans);
  }
  auto y = rms_norm(h, weight, eps);
  modulate_(y, table, shift_i, scale_i, segs);
  return y;
}

// h[seg] += gate[idx] * branch[seg]: the gated residual, in fp32 math.
void gated_residual_(at::Tensor& h, const at::Tensor& branch, const at::Tensor& table, int64_t gate_i,
                     const std::vector<Segment>& segs) {
  for (const auto& s : segs) {
    auto rows = h.narrow(0, s.start, s.length);
    auto b = branch.narrow(0, s.start, s.length);
    if (b.scalar_type() != at::kFloat) b = b.to(at::kFloat);
    rows.addcmul_(b, table[s.index][gate_i]);  // rows + b * gate in one pass
  }
}

[[noreturn]] void throw_missing_table(const at::Tensor& uniq, const AdalnTables* tables,
                                      const at::Tensor& silu_temb) {
  auto t = uniq.to(at::kCPU, at::kFloat).contiguous();
  const TimestepSet wanted(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  const auto* e = tables ? tables->find(uniq) : nullptr;
  const std::string why = !tables ? std::string("no tables were given")
                          : e && !at::equal(e->silu_temb, silu_temb)
                              ? "the tables hold these timesteps for another time embedding (a LoRA on "
                                "time_embedder changes it)"
                              : "the tables were computed for " + std::to_string(tables->size()) +
                                    " other timestep sets (" + tables->describe_sets() + ")";
  throw Error(ErrorKind::kInvalidArgument,
              "AdaLN tables: an evaluation at timesteps " + describe(wanted) + " has no table: " + why +
                  ", and the AdaLN projections are not resident. Compute the tables for the request's "
                  "grid first, or keep the projections (adaln-tables=false)");
}

}  // namespace

at::Tensor blocked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             int64_t max_score_elements) {
  // q [S, heads, D] against k, v [Sk, heads, D] (Sk > S when a chunk attends cached rows).
  const int64_t s = q.size(0), sk = k.size(0), heads = q.size(1), d = q.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto qh = q.transpose(0, 1).mul(scale).contiguous();  // [heads, S, D], pre-scaled
  auto kt = k.permute({1, 2, 0}).contiguous();          // [heads, D, Sk]
  auto vh = v.transpose(0, 1).contiguous();             // [heads, Sk, D]
  auto out = at::empty({s, heads, d}, q.options());
  const int64_t block =
      std::min(s, std::max<int64_t>(16, max_score_elements / std::max<int64_t>(1, heads * sk)));
  // One score buffer and one output buffer for all blocks, written with the out= kernels: a
  // fresh large tensor per block costs more in page faults than the GEMM itself on CPU.
  auto scores_buf = at::empty({heads * block * sk}, q.options().dtype(at::kFloat));
  auto probs_buf = q.scalar_type() == at::kFloat ? scores_buf : at::empty({heads * block * sk}, q.options());
  auto o_buf = at::empty({heads * block * d}, q.options());
  // Contiguous [heads, b, n] views at the start of a flat buffer (the last block is shorter).
  auto first = [&](const at::Tensor& buf, int64_t b, int64_t n) {
    return buf.narrow(0, 0, heads * b * n).view({heads, b, n});
  };
  for (int64_t i0 = 0; i0 < s; i0 += block) {
    const int64_t b = std::min(block, s - i0);
    auto scores = first(scores_buf, b, sk);
    if (q.scalar_type() == at::kFloat) {
      at::bmm_out(scores, qh.narrow(1, i0, b), kt);  // [heads, b, Sk]
    } else {
      scores.copy_(at::bmm(qh.narrow(1, i0, b), kt));
    }
    at::_softmax_out(scores, scores, -1, false);  // in place: the fused row-wise kernel
    auto probs = first(probs_buf, b, sk);
    if (probs.data_ptr() != scores.data_ptr()) probs.copy_(scores);
    auto o = first(o_buf, b, d);
    at::bmm_out(o, probs, vh);  // [heads, b, D]
    out.narrow(0, i0, b).copy_(o.transpose(0, 1));
  }
  return out.view({s, heads * d});
}

at::Tensor linear_fp32(const LinearWeights& l, const at::Tensor& x) {
  auto xf = x.to(at::kFloat);
  return adapted(h3::linear(xf, l.weight.to(at::kFloat), l.bias.defined() ? l.bias.to(at::kFloat) : l.bias),
                 l.lora, xf);
}

at::Tensor linear_in_dtype(const LinearWeights& l, const at::Tensor& x) {
  auto xd = as_dtype(x, l.weight);
  return adapted(h3::linear(xd, l.weight, l.bias), l.lora, xd);
}

std::vector<Segment> segments_of(const at::Tensor& index) {
  auto idx = index.to(at::kCPU, at::kLong).contiguous();
  const int64_t* p = idx.data_ptr<int64_t>();
  std::vector<Segment> segs;
  for (int64_t i = 0; i < idx.numel(); ++i) {
    if (segs.empty() || segs.back().index != p[i]) {
      segs.push_back({i, 1, p[i]});
    } else {
      ++segs.back().length;
    }
  }
  return segs;
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (row_norm_applies(x, weight)) return rms_norm_rows(x, weight, eps);  // one pass per row
  if (x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat) {
    return at::rms_norm(x, {x.size(-1)}, weight, eps);  // fp32 math (a composite on the CPU)
  }
  auto xf = x.to(at::kFloat);
  auto inv = at::rsqrt(xf.pow(2).mean(-1, true).add_(eps));
  return (xf * inv).mul_(weight.to(at::kFloat));
}

at::Tensor timestep_features(const at::Tensor& t, int64_t dim) {
  const int64_t half = dim / 2;
  auto freqs = at::arange(half, t.options().dtype(at::kFloat)).mul(-std::log(10000.0)).div(half).exp();
  auto args = t.to(at::kFloat).reshape({-1, 1}) * freqs.unsqueeze(0);
  return at::cat({at::cos(args), at::sin(args)}, -1);
}

at::Tensor time_embedding(const DitWeights& w, const at::Tensor& t, int64_t freq_dim) {
  auto f = timestep_features(t, freq_dim);
  auto l1 = w.time_linear_1.weight.to(at::kFloat);
  auto l2 = w.time_linear_2.weight.to(at::kFloat);
  auto x = at::silu(adapted(h3::linear(f, l1, w.time_linear_1.bias.to(at::kFloat)), w.time_linear_1.lora, f));
  return adapted(h3::linear(x, l2, w.time_linear_2.bias.to(at::kFloat)), w.time_linear_2.lora, x);
}

at::Tensor adaln_rows(const LinearWeights& adaln, const at::Tensor& silu_temb) {
  auto x = as_dtype(silu_temb, adaln.weight);
  return adapted(h3::linear(x, adaln.weight, adaln.bias), adaln.lora, x);
}

at::Tensor modality_table(const at::Tensor& gathered_rows, int64_t hidden) {
  return gathered_rows.to(at::kFloat).reshape({-1, 6, hidden});
}

Modulation modulation(const DitWeights& w, const DitConfig& c, const at::Tensor& row_timesteps,
                      const TensorParallel& tp, const AdalnTables* tables) {
  const auto dev = w.proj_in.weight.device();
  auto [uniq, inv, counts] = at::_unique2(row_timesteps, /*sorted=*/true, /*return_inverse=*/true);
  (void)counts;
  const int64_t m = uniq.size(0);
  auto silu_temb = at::silu(time_embedding(w, uniq.to(dev), c.freq_dim));
  const AdalnTables::Entry* e = tables ? tables->find(uniq) : nullptr;
  if (e && !at::equal(e->silu_temb, silu_temb)) e = nullptr;  // another time embedding (a LoRA on it)
  Modulation out;
  out.index = inv.to(at::kLong);
  if (!e) {
    if (!w.norm_out_linear.weight.defined()) throw_missing_table(uniq, tables, silu_temb);
    std::vector<at::Tensor> local_rows;
    local_rows.reserve(w.blocks.size());
    for (const auto& b : w.blocks) local_rows.push_back(adaln_rows(b.adaln, silu_temb));
    // One gather for all blocks: [M, blocks, 18H / tp] per rank -> [M, blocks, 18H].
    out.block_rows = tp.gather_last_dim(at::stack(local_rows, 1));
    out.final_table = adaln_rows(w.norm_out_linear, silu_temb).to(at::kFloat).reshape({m, 2, c.hidden_size});
    return out;
  }
  // The tables' rows, with any adapter added as adaln_rows() adds it.
  const auto x = silu_temb.to(e->block_rows.scalar_type());
  bool any_adapter = false;
  for (const auto& b : w.blocks) any_adapter = any_adapter || b.adaln.lora.defined();
  at::Tensor local = e->block_rows;
  if (any_adapter) {
    std::vector<at::Tensor> local_rows;
    local_rows.reserve(w.blocks.size());
    for (size_t i = 0; i < w.blocks.size(); ++i) {
      local_rows.push_back(adapted(local.select(1, static_cast<int64_t>(i)), w.blocks[i].adaln.lora, x));
    }
    local = at::stack(local_rows, 1);
  }
  out.block_rows = tp.gather_last_dim(local);
  out.final_table =
      adapted(e->final_rows, w.norm_out_linear.lora, x).to(at::kFloat).reshape({m, 2, c.hidden_size});
  return out;
}

RopeTable rope_table(const at::Tensor& positions, int64_t freqs_per_axis, double theta) {
  auto opts = positions.options().dtype(at::kFloat);
  auto exps = at::arange(0, 2 * freqs_per_axis, 2, opts).div(static_cast<double>(2 * freqs_per_axis));
  auto inv = at::pow(theta, exps).reciprocal();  // theta^(-i/F)
  auto pos = positions.to(at::kFloat);
  auto ang = at::cat({pos.narrow(1, 0, 1) * inv, pos.narrow(1, 1, 1) * inv, pos.narrow(1, 2, 1) * inv}, 1);
  auto emb = at::cat({ang, ang}, 1).unsqueeze(1);  // [S, 1, 6F]
  return {at::cos(emb), at::sin(emb)};
}

void apply_rope_(at::Tensor& x, const RopeTable& rope) {
  const int64_t r = rope.cos.size(-1), half = r / 2;
  auto xr = x.narrow(-1, 0, r);
  auto rot = at::cat({xr.narrow(-1, half, half).neg(), xr.narrow(-1, 0, half)}, -1);
  xr.mul_(rope.cos).addcmul_(rot, rope.sin);
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const OpTimer timer(OpKind::kAttention);
  if (cpu_attention_applies(q, k, v)) return cpu_attention(q, k, v, kDefaultScoreElements);
#if H3_HAVE_FUSED_SDPA
  const int64_t s = q.size(0), heads = q.size(1), d = q.size(2);
  auto o = at::scaled_dot_product_attention(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
                                            v.transpose(0, 1).unsqueeze(0));
  return o.squeeze(0).transpose(0, 1).reshape({s, heads * d});
#else
  return blocked_attention(q, k, v);
#endif
}

at::Tensor attention_sublayer(const at::Tensor& a, const BlockWeights& w, const DitConfig& c,
                              const RopeTable* rope, const TensorParallel& tp, const KvContext* kv,
                              bool rows_split, const StreamsKv* streams) {
  const int64_t s = a.size(0), d = c.head_dim, heads = w.local_heads(d);
  auto x = as_dtype(a, w.to_q);
  // Per-head RMSNorm, then RoPE: in one pass per head row where the fused kernel takes them.
  auto norm_rope = [&](const at::Tensor& lin, const at::Tensor& weight) {
    auto t = lin.view({s, heads, d});
    if (rope && row_norm_applies(t, weight) && rope->cos.device().is_cpu()) {
      return rms_norm_rope_rows(t, weight, c.qk_norm_eps, rope->cos, rope->sin);
    }
    auto y = rms_norm(t, weight, c.qk_norm_eps);
    if (rope) apply_rope_(y, *rope);
    return y;
  };
  auto q = norm_rope(adapted(h3::linear(x, w.to_q, {}), w.to_q_lora, x), w.norm_q);
  auto k = norm_rope(adapted(h3::linear(x, w.to_k, {}), w.to_k_lora, x), w.norm_k);
  auto v = adapted(h3::linear(x, w.to_v, {}), w.to_v_lora, x).view({s, heads, d});
  k = as_dtype(k, v);
  const bool ulysses = rows_split && tp.sp_size() > 1;
  if (ulysses) {
    // Rows to heads: every row of this SP rank's heads (q converted as attention would).
    auto all = tp.rows_to_heads(at::stack({as_dtype(q, v), k, v}, 1));
    q = all.select(1, 0);
    k = all.select(1, 1);
    v = all.select(1, 2);
  }
  at::Tensor o;
  if (kv) {
    // The cache keeps keys after RoPE (at the rows' absolute positions) and raw values.
    if (kv->own_k) *kv->own_k = k;
    if (kv->own_v) *kv->own_v = v;
  }
  if (streams) {
    if (ulysses) {
      throw Error(ErrorKind::kInvalidArgument,
                  "several streams' rows in one forward need the whole rows on each rank (sp 1), not sp " +
                      std::to_string(tp.sp_size()));
    }
    // Each stream's rows attend its own cache and themselves, never another stream's rows.
    std::vector<at::Tensor> parts;
    int64_t begin = 0;
    for (size_t i = 0; i < streams->rows.size(); ++i) {
      const int64_t n = streams->rows[i];
      const KvContext& own = streams->kv[i];
      const at::Tensor qi = q.narrow(0, begin, n), ki = k.narrow(0, begin, n), vi = v.narrow(0, begin, n);
      if (own.own_k) *own.own_k = ki;
      if (own.own_v) *own.own_v = vi;
      parts.push_back(own.past_k.defined()
                          ? attention(as_dtype(qi, vi), at::cat({own.past_k, ki}), at::cat({own.past_v, vi}))
                          : attention(as_dtype(qi, vi), ki, vi));
      begin += n;
    }
    if (begin != s) {
      throw Error(ErrorKind::kInternal, "several streams' rows in one forward: the streams hold " +
                                            std::to_string(begin) + " rows of " + std::to_string(s));
    }
    o = at::cat(parts);
  } else if (kv && kv->past_k.defined()) {
    o = attention(as_dtype(q, v), at::cat({kv->past_k, k}), at::cat({kv->past_v, v}));
  } else {
    o = attention(as_dtype(q, v), k, v);
  }
  if (ulysses) o = tp.heads_to_rows(o, o.size(0));  // heads back to this rank's rows
  auto out = adapted(h3::linear(o, w.to_out, {}), w.to_out_lora, o);
  tp.all_reduce_sum(out);
  return out;
}

at::Tensor ffn_sublayer(const at::Tensor& b, const BlockWeights& w, const TensorParallel& tp) {
  // ff_in rows are [value; gate] (this rank's shard of each): silu(gate) * value, the activation
  // and the product fused into the two GEMMs unless an adapter adds to the projection first.
  const auto x = as_dtype(b, w.ff_in);
  const int64_t f = w.ff_in.size(0) / 2;
  at::Tensor act;
  if (w.ff_in_lora.defined()) {
    auto pre = adapted(h3::linear(x, w.ff_in, {}), w.ff_in_lora, x);
    act = at::silu(pre.narrow(-1, f, f)).mul_(pre.narrow(-1, 0, f));
  } else {
    auto gate = h3::linear_silu(x, w.ff_in.narrow(0, f, f), {});
    act = h3::linear_mul(x, w.ff_in.narrow(0, 0, f), {}, gate);
  }
  auto out = adapted(h3::linear(act, w.ff_out, {}), w.ff_out_lora, act);
  tp.all_reduce_sum(out);
  return out;
}

void transformer_block_(at::Tensor& h, const BlockWeights& w, const DitConfig& c, const at::Tensor& table,
                        const std::vector<Segment>& segs, const RopeTable& rope, const TensorParallel& tp,
                        const KvContext* kv, const StreamsKv* streams) {
  auto a = norm_modulate(h, w.norm1, c.norm_eps, table, 0, 1, segs);
  auto o = attention_sublayer(a, w, c, &rope, tp, kv, /*rows_split=*/true, streams);
  gated_residual_(h, o, table, 2, segs);
  auto b = norm_modulate(h, w.norm2, c.norm_eps, table, 3, 4, segs);
  auto f = ffn_sublayer(b, w, tp);
  gated_residual_(h, f, table, 5, segs);
}

OwnRows own_rows(const at::Tensor& h, const RopeTable& rope, const at::Tensor& table_index,
                 const TensorParallel& tp) {
  OwnRows out;
  out.range = tp.own_rows(h.size(0));
  const int64_t b = out.range.begin, n = out.range.count;
  if (tp.sp_size() == 1) {
    out.h = h;
    out.rope = rope;
    out.segs = segments_of(table_index);
    return out;
  }
  out.h = h.narrow(0, b, n).contiguous();
  out.rope = RopeTable{rope.cos.narrow(0, b, n), rope.sin.narrow(0, b, n)};
  out.segs = segments_of(table_index.narrow(0, b, n));
  return out;
}

at::Tensor token_refiner(const at::Tensor& text_h, const DitWeights& w, const DitConfig& c,
                         const TensorParallel& tp) {
  auto x = text_h.to(at::kFloat);
  for (const auto& blk : w.refiner) {
    x = x + attention_sublayer(rms_norm(x, blk.norm1, c.norm_eps), blk, c, nullptr, tp).to(at::kFloat);
    x = x + ffn_sublayer(rms_norm(x, blk.norm2, c.norm_eps), blk, tp).to(at::kFloat);
  }
  return rms_norm(x, w.refiner_norm, c.norm_eps);
}

at::Tensor final_modulation(const at::Tensor& h, const at::Tensor& norm_weight, double eps,
                            const at::Tensor& table, const std::vector<Segment>& segs) {
  return norm_modulate(h, norm_weight, eps, table, 0, 1, segs);
}

}  // namespace h3::dit
