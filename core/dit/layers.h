// The DiT's building blocks (docs/h3-model.md §4.4) as functions over plain tensors, so that each part
// can be checked on its own against a reference. Rows are the packed sequence's rows; a row's
// AdaLN vectors are picked by run-length segments of its (timestep, modality) index.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "dit/config.h"
#include "dit/tp.h"
#include "dit/weights.h"

namespace h3::dit {

// Rows [start, start + length) all use row `index` of a modulation table.
struct Segment {
  int64_t start = 0, length = 0, index = 0;
};
// Run-length segments of a 1-D integer index over rows.
std::vector<Segment> segments_of(const at::Tensor& index);

// The patch projections and the heads: x, weight and bias in fp32, plus the layer's adapter.
at::Tensor linear_fp32(const LinearWeights& l, const at::Tensor& x);
// A layer in its weight's dtype (x converted to it), plus the layer's adapter.
at::Tensor linear_in_dtype(const LinearWeights& l, const at::Tensor& x);

// x * rsqrt(mean(x^2, -1) + eps) * weight, computed in fp32, returned in x's dtype.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// [M] timesteps (t in [0, 1], unscaled) -> [M, dim] sinusoidal features, cos half first,
// frequencies exp(-ln(1e4) * i / (dim / 2)).
at::Tensor timestep_features(const at::Tensor& t, int64_t dim);
// The time MLP in fp32: linear_1, SiLU, linear_2 -> [M, time_embed_dim] (with their adapters).
at::Tensor time_embedding(const DitWeights& w, const at::Tensor& t, int64_t freq_dim);

// One block's AdaLN rows for the M distinct timesteps: [M, 18H / tp] on this rank.
at::Tensor adaln_rows(const LinearWeights& adaln, const at::Tensor& silu_temb);
// The gathered per-block tables viewed as [M * 3, 6, H]: row m*3 + modality (0 video, 1 text,
// 2 audio); vectors shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp.
at::Tensor modality_table(const at::Tensor& gathered_rows, int64_t hidden);

class AdalnTables;

// One evaluation's modulation for the distinct timesteps of its rows (sorted ascending): the
// time embedding, SiLU in fp32, every block's AdaLN rows (gathered over the ranks in one
// collective) and the final layer's [shift; scale]. The rows come from `tables` when it holds
// these timesteps (dit/adaln_tables.h; the same numbers), else from the projections; when those
// were dropped, an evaluation the tables lack throws h3::Error(kInvalidArgument) naming both.
struct Modulation {
  at::Tensor block_rows;   // [M, blocks, 18H]
  at::Tensor final_table;  // [M, 2, H] fp32
  at::Tensor index;        // [S] int64: each row's timestep among the M
};
Modulation modulation(const DitWeights& w, const DitConfig& c, const at::Tensor& row_timesteps,
                      const TensorParallel& tp, const AdalnTables* tables = nullptr);

// RoPE angles for positions [S, 3] (fp64): cos and sin [S, 6F] of [t*f, h*f, w*f] twice,
// f_i = theta^(-i/F), i < F; positions cast to fp32 first.
struct RopeTable {
  at::Tensor cos, sin;  // [S, 1, 6F], broadcast over heads
};
RopeTable rope_table(const at::Tensor& positions, int64_t freqs_per_axis, double theta);
// Rotate-half RoPE on the first 6F dims of every head of x [S, heads, D], in place.
void apply_rope_(at::Tensor& x, const RopeTable& rope);

// Full non-causal attention of q [S, heads, D] over k, v [Sk, heads, D] -> [S, heads * D]
// (Sk = S but for a chunk that attends cached rows). On the CPU in fp32 common/cpu_attention.h
// (oneDNN GEMMs per head and block of kDefaultScoreElements scores); elsewhere the LibTorch's
// fused scaled-dot-product attention when it has one; otherwise blocked_attention.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
// softmax(q k^T / sqrt(D)) v over blocks of queries whose score block [heads, block, S] holds at
// most `max_score_elements` elements (at least 16 queries per block): memory bounded on CPU.
constexpr int64_t kDefaultScoreElements = int64_t(1) << 22;  // 16 MiB of fp32 scores
at::Tensor blocked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             int64_t max_score_elements = kDefaultScoreElements);

// What a chunk-causal forward (dit/causal.h) adds to a block's attention: the cached keys and
// values of earlier rows [P, heads_local, D] that the rows attend beside their own (undefined:
// none), and where the rows' own rotated keys and raw values go for the cache (null: nowhere).
struct KvContext {
  at::Tensor past_k, past_v;
  at::Tensor* own_k = nullptr;
  at::Tensor* own_v = nullptr;
};

// Several streams' chunk rows in one forward (dit/causal.h, forward_chunks): the rows are the
// streams' back to back, rows[i] of stream i, and stream i's rows attend only its own cache kv[i]
// and themselves, while every projection runs once over all the rows. Without sequence
// parallelism only.
struct StreamsKv {
  std::vector<int64_t> rows;
  std::vector<KvContext> kv;
};

// Self-attention sublayer on normalised input a [S, H]: q/k/v projections of this rank's heads,
// per-head q/k RMSNorm, RoPE when `rope` is non-null, attention (over the past keys and values
// of `kv` first, when given; per stream with `streams` instead), out projection, all_reduce.
// With `rows_split` (sequence parallelism: a holds this SP rank's rows, rope their angles) q, k
// and v go all-to-all from rows to heads before attention, which then sees every row for heads /
// sp heads (the cache likewise), and the output back from heads to rows.
at::Tensor attention_sublayer(const at::Tensor& a, const BlockWeights& w, const DitConfig& c,
                              const RopeTable* rope, const TensorParallel& tp, const KvContext* kv = nullptr,
                              bool rows_split = false, const StreamsKv* streams = nullptr);
// SwiGLU sublayer: silu(gate) * up with ff.net.0.proj rows [up; gate], ff.net.2, all_reduce.
// The block's LoRA adapters, when attached, add to each projection's output (dit/adapter.h).
at::Tensor ffn_sublayer(const at::Tensor& b, const BlockWeights& w, const TensorParallel& tp);

// One transformer block with per-row modulation: `table` [K, 6, H] (K = 3M), `segs` pick rows.
// Under sequence parallelism h, segs and rope are this SP rank's rows (OwnRows).
void transformer_block_(at::Tensor& h, const BlockWeights& w, const DitConfig& c, const at::Tensor& table,
                        const std::vector<Segment>& segs, const RopeTable& rope, const TensorParallel& tp,
                        const KvContext* kv = nullptr, const StreamsKv* streams = nullptr);
// This rank's share of a forward's rows under sequence parallelism (all rows without): the
// blocks run on these, and gather_rows() puts the residual stream back together after them.
struct OwnRows {
  RowRange range;
  at::Tensor h;               // [n, H] this rank's rows of the residual stream
  RopeTable rope;             // their RoPE angles
  std::vector<Segment> segs;  // their modulation segments, counted from h's first row
};
// `h` [S, H] every row, `rope` every row's angles, `table_index` [S] each row's modulation row.
OwnRows own_rows(const at::Tensor& h, const RopeTable& rope, const at::Tensor& table_index,
                 const TensorParallel& tp);

// The token refiner on text rows: plain pre-norm blocks (no AdaLN, no RoPE) + final RMSNorm.
at::Tensor token_refiner(const at::Tensor& text_h, const DitWeights& w, const DitConfig& c,
                         const TensorParallel& tp);
// Final layer: RMSNorm * weight, then shift/scale of the row's timestep; `table` [M, 2, H]
// ([shift; scale]), `segs` index timesteps. Returns y in fp32.
at::Tensor final_modulation(const at::Tensor& h, const at::Tensor& norm_weight, double eps,
                            const at::Tensor& table, const std::vector<Segment>& segs);

}  // namespace h3::dit
