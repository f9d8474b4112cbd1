// Each part of the DiT against a plain fp64 reference written here from the definitions in
// docs/h3-model.md §4.4 (unfused: explicit loops, full softmax, per-row gathered modulation), on the
// tiny golden model's weights and small random inputs. Tolerances are for fp32 arithmetic on
// values of order 1.
#include "dit/layers.h"

#include <gtest/gtest.h>

#include <cmath>

#include "dit/packed_sequence.h"
#include "dit/transformer.h"
#include "dit_test_util.h"

namespace h3::dit {
namespace {

using testing::golden_dir;
using testing::max_abs_diff;

struct Tiny {
  DitConfig config;
  DitWeights w;
};

const Tiny& tiny() {
  static const Tiny t = [] {
    auto model = Transformer::load(golden_dir() + "/transformer_tiny");
    return Tiny{model.config(), model.weights()};
  }();
  return t;
}

at::Tensor d(const at::Tensor& t) {
  return t.to(at::kDouble);
}
at::Tensor lin(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {}) {
  auto y = at::matmul(x, d(w).t());
  return b.defined() ? y + d(b) : y;
}
at::Tensor ref_silu(const at::Tensor& x) {
  return x / (1 + at::exp(-x));
}
at::Tensor ref_rms(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x / at::sqrt(x.pow(2).mean(-1, true) + eps) * d(w);
}

at::Tensor ref_time_embedding(const std::vector<double>& ts, const DitWeights& w, int64_t dim) {
  const int64_t half = dim / 2;
  auto f = at::zeros({static_cast<int64_t>(ts.size()), dim}, at::kDouble);
  for (size_t m = 0; m < ts.size(); ++m) {
    for (int64_t i = 0; i < half; ++i) {
      const double fr = std::exp(-std::log(10000.0) * static_cast<double>(i) / static_cast<double>(half));
      f[m][i] = std::cos(ts[m] * fr);
      f[m][half + i] = std::sin(ts[m] * fr);
    }
  }
  return lin(ref_silu(lin(f, w.time_linear_1.weight, w.time_linear_1.bias)), w.time_linear_2.weight,
             w.time_linear_2.bias);
}

// Rotate-half RoPE by explicit loops: dims i and i + 3F rotate by angle pos[axis] * theta^(-k/F).
at::Tensor ref_rope(const at::Tensor& x, const at::Tensor& pos, int64_t f, double theta) {
  auto out = x.clone();
  auto xa = x.accessor<double, 3>();
  auto oa = out.accessor<double, 3>();
  auto pa = pos.accessor<double, 2>();
  for (int64_t s = 0; s < x.size(0); ++s) {
    for (int64_t h = 0; h < x.size(1); ++h) {
      for (int64_t i = 0; i < 3 * f; ++i) {
        const double ang =
            pa[s][i / f] * std::pow(theta, -static_cast<double>(i % f) / static_cast<double>(f));
        const double x1 = xa[s][h][i], x2 = xa[s][h][i + 3 * f];
        oa[s][h][i] = x1 * std::cos(ang) - x2 * std::sin(ang);
        oa[s][h][i + 3 * f] = x2 * std::cos(ang) + x1 * std::sin(ang);
      }
    }
  }
  return out;
}

at::Tensor ref_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t s = q.size(0), heads = q.size(1), dd = q.size(2);
  auto out = at::zeros({s, heads * dd}, at::kDouble);
  for (int64_t h = 0; h < heads; ++h) {
    auto qh = q.select(1, h), kh = k.select(1, h), vh = v.select(1, h);
    auto p = at::softmax(at::matmul(qh, kh.t()) / std::sqrt(static_cast<double>(dd)), -1);
    out.narrow(1, h * dd, dd).copy_(at::matmul(p, vh));
  }
  return out;
}

at::Tensor ref_attn_sublayer(const at::Tensor& a, const BlockWeights& w, const DitConfig& c,
                             const at::Tensor* pos) {
  const int64_t s = a.size(0), dd = c.head_dim, heads = w.to_q.size(0) / dd;
  auto q = ref_rms(lin(a, w.to_q).view({s, heads, dd}), w.norm_q, c.qk_norm_eps);
  auto k = ref_rms(lin(a, w.to_k).view({s, heads, dd}), w.norm_k, c.qk_norm_eps);
  auto v = lin(a, w.to_v).view({s, heads, dd});
  if (pos) {
    q = ref_rope(q, *pos, c.rope_freq_dim, c.rope_theta);
    k = ref_rope(k, *pos, c.rope_freq_dim, c.rope_theta);
  }
  return lin(ref_attention(q, k, v), w.to_out);
}

at::Tensor ref_ffn(const at::Tensor& b, const BlockWeights& w) {
  const int64_t f = w.ff_in.size(0) / 2;
  auto up = lin(b, w.ff_in.narrow(0, 0, f));
  auto gate = lin(b, w.ff_in.narrow(0, f, f));
  return lin(ref_silu(gate) * up, w.ff_out);
}

// The block with per-row modulation vectors gathered row by row from the table.
at::Tensor ref_block(const at::Tensor& h0, const BlockWeights& w, const DitConfig& c, const at::Tensor& table,
                     const at::Tensor& row_index, const at::Tensor& pos) {
  auto mods = d(table).index_select(0, row_index);  // [S, 6, H]
  auto m = [&](int64_t j) { return mods.select(1, j); };
  auto a = ref_rms(h0, w.norm1, c.norm_eps) * (1 + m(1)) + m(0);
  auto h = h0 + m(2) * ref_attn_sublayer(a, w, c, &pos);
  auto b = ref_rms(h, w.norm2, c.norm_eps) * (1 + m(4)) + m(3);
  return h + m(5) * ref_ffn(b, w);
}

TEST(DitParts, TimeEmbeddingMatchesFp64Reference) {
  const auto& t = tiny();
  std::vector<double> ts = {0.0, 0.04000002145767212, 0.3, 0.97, 1.0};
  auto tf = at::tensor(std::vector<float>(ts.begin(), ts.end()));
  std::vector<double> tsf(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) tsf[i] = static_cast<double>(static_cast<float>(ts[i]));
  auto got = time_embedding(t.w, tf, t.config.freq_dim);
  auto want = ref_time_embedding(tsf, t.w, t.config.freq_dim);
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_LE(max_abs_diff(got, want), 2e-5);
}

TEST(DitParts, AdaLnTableIsModalityMajorAndMatchesReference) {
  const auto& t = tiny();
  const int64_t hidden = t.config.hidden_size;
  std::vector<double> ts = {0.25, 0.75};
  auto temb = ref_time_embedding(ts, t.w, t.config.freq_dim);
  const auto& adaln = t.w.blocks[1].adaln;
  auto rows = lin(ref_silu(temb), adaln.weight, adaln.bias);  // [M, 18H]
  auto table = modality_table(adaln_rows(adaln, at::silu(temb.to(at::kFloat))), hidden);
  ASSERT_EQ(table.sizes(), (at::IntArrayRef{6, 6, hidden}));
  for (int64_t m = 0; m < 2; ++m) {
    for (int64_t mod = 0; mod < 3; ++mod) {
      for (int64_t j = 0; j < 6; ++j) {
        auto want = rows[m].narrow(0, (mod * 6 + j) * hidden, hidden);
        EXPECT_LE(max_abs_diff(table[m * 3 + mod][j], want), 1e-5) << m << " " << mod << " " << j;
      }
    }
  }
}

TEST(DitParts, RopeMatchesFp64Reference) {
  const auto& c = tiny().config;
  auto pos = packed_positions(5, 8, 7, 2, 3);  // text, stereo audio, 7 latent frames of 2x3 patches
  const int64_t s = pos.size(0);
  auto x = at::randn({s, 2, c.head_dim}, at::kDouble);
  auto got = x.to(at::kFloat);
  apply_rope_(got, rope_table(pos, c.rope_freq_dim, c.rope_theta));
  auto want = ref_rope(x, pos, c.rope_freq_dim, c.rope_theta);
  EXPECT_LE(max_abs_diff(got, want), 2e-5);
  // Dims past the rotated 96 pass through untouched.
  EXPECT_TRUE(at::equal(got.narrow(2, c.rope_dims(), c.head_dim - c.rope_dims()),
                        x.to(at::kFloat).narrow(2, c.rope_dims(), c.head_dim - c.rope_dims())));
}

TEST(DitParts, BlockedAttentionMatchesFullSoftmax) {
  auto q = at::randn({70, 3, 16}, at::kDouble), k = at::randn({70, 3, 16}, at::kDouble);
  auto v = at::randn({70, 3, 16}, at::kDouble);
  auto want = ref_attention(q, k, v);
  auto qf = q.to(at::kFloat), kf = k.to(at::kFloat), vf = v.to(at::kFloat);
  // 16 queries per block: 5 blocks, the last one partial.
  EXPECT_LE(max_abs_diff(blocked_attention(qf, kf, vf, 16 * 3 * 70), want), 1e-5);
  EXPECT_LE(max_abs_diff(attention(qf, kf, vf), want), 1e-5);
}

TEST(DitParts, TransformerBlockMatchesFp64Reference) {
  const auto& t = tiny();
  const auto& c = t.config;
  auto pos = packed_positions(4, 3, 2, 2, 3);  // 4 text, 6 audio, 12 video rows
  const int64_t s = pos.size(0);
  auto h = at::randn({s, c.hidden_size}, at::kDouble);
  auto table = (at::randn({6, 6, c.hidden_size}, at::kDouble) * 0.3).to(at::kFloat);  // M = 2 timesteps
  // Per-row (timestep, modality) index with runs: text(t1) audio(t0) video(t1), as a T2VA step.
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < 4; ++i) idx.push_back(1 * 3 + 1);
  for (int64_t i = 0; i < 6; ++i) idx.push_back(0 * 3 + 2);
  for (int64_t i = 0; i < 12; ++i) idx.push_back(1 * 3 + 0);
  auto row_index = at::tensor(idx);
  auto got = h.to(at::kFloat);
  transformer_block_(got, t.w.blocks[0], c, table, segments_of(row_index),
                     rope_table(pos, c.rope_freq_dim, c.rope_theta), TensorParallel());
  auto want = ref_block(h, t.w.blocks[0], c, table, row_index, pos);
  EXPECT_LE(max_abs_diff(got, want), 1e-4);
}

TEST(DitParts, TokenRefinerMatchesFp64Reference) {
  const auto& t = tiny();
  const auto& c = t.config;
  auto text = at::randn({9, c.text_dim}, at::kDouble);
  auto x = lin(text, t.w.context_embedder.weight, t.w.context_embedder.bias);
  auto got = token_refiner(x.to(at::kFloat), t.w, c, TensorParallel());
  for (const auto& blk : t.w.refiner) {
    x = x + ref_attn_sublayer(ref_rms(x, blk.norm1, c.norm_eps), blk, c, nullptr);
    x = x + ref_ffn(ref_rms(x, blk.norm2, c.norm_eps), blk);
  }
  auto want = ref_rms(x, t.w.refiner_norm, c.norm_eps);
  EXPECT_LE(max_abs_diff(got, want), 1e-4);
}

TEST(DitParts, FinalLayerMatchesFp64Reference) {
  const auto& t = tiny();
  const auto& c = t.config;
  const int64_t hidden = c.hidden_size;
  auto h = at::randn({10, hidden}, at::kDouble);
  std::vector<double> ts = {0.2, 0.6};
  auto temb = ref_time_embedding(ts, t.w, c.freq_dim);
  auto rows =
      lin(ref_silu(temb), t.w.norm_out_linear.weight, t.w.norm_out_linear.bias);  // [2, 2H]: [shift; scale]
  auto inv = at::tensor(std::vector<int64_t>{1, 1, 1, 0, 0, 0, 0, 1, 1, 1});
  auto shift = rows.narrow(1, 0, hidden).index_select(0, inv);
  auto scale = rows.narrow(1, hidden, hidden).index_select(0, inv);
  auto want = lin(ref_rms(h, t.w.norm_out, c.final_norm_eps) * (1 + scale) + shift, t.w.proj_out.weight,
                  t.w.proj_out.bias);
  auto table = adaln_rows(t.w.norm_out_linear, at::silu(temb.to(at::kFloat))).reshape({2, 2, hidden});
  auto y = final_modulation(h.to(at::kFloat), t.w.norm_out, c.final_norm_eps, table, segments_of(inv));
  auto got = at::linear(y, t.w.proj_out.weight, t.w.proj_out.bias);
  EXPECT_LE(max_abs_diff(got, want), 1e-4);
}

TEST(DitParts, SegmentsAreRunsOfTheIndex) {
  auto segs = segments_of(at::tensor(std::vector<int64_t>{4, 4, 2, 2, 2, 3, 4}));
  ASSERT_EQ(segs.size(), 4u);
  EXPECT_EQ(segs[0].start, 0);
  EXPECT_EQ(segs[0].length, 2);
  EXPECT_EQ(segs[0].index, 4);
  EXPECT_EQ(segs[1].length, 3);
  EXPECT_EQ(segs[3].start, 6);
  EXPECT_EQ(segs[3].index, 4);
}

}  // namespace
}  // namespace h3::dit
