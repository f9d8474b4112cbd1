// The CPU attention (common/cpu_attention.h): softmax(q k^T / sqrt(D)) v against an fp64 reference
// over blocks of every size, the same bits at any intra-op thread count, its block sizes, and where
// it applies.
#include "common/cpu_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "common/cpu_kernels.h"
#include "common/fused_linear.h"

namespace h3 {
namespace {

// The oneDNN GEMM blocks as fp32's attention (an AVX-512 CPU chooses the fused kernel instead:
// common/cpu_kernels.h), for the tests of the blocks themselves.
CpuKernels gemm_block_kernels() {
  CpuKernels k;
  k.gemm = GemmPath::kOnednnTiles;
  k.attention = AttentionPath::kGemmBlocks;
  return k;
}

// q [S, heads, D], k and v [Sk, heads, D] in fp64 -> [S, heads * D]; causal: query i sees keys 0..i.
at::Tensor reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal = false) {
  const int64_t s = q.size(0), heads = q.size(1), d = q.size(2);
  at::Tensor out = at::empty({s, heads, d}, at::kDouble);
  for (int64_t h = 0; h < heads; ++h) {
    at::Tensor scores = at::matmul(q.select(1, h), k.select(1, h).t()) / std::sqrt(static_cast<double>(d));
    if (causal) scores.masked_fill_(at::ones({s, k.size(0)}, at::kBool).triu(1), -INFINITY);
    const at::Tensor p = at::softmax(scores, -1);
    out.select(1, h).copy_(at::matmul(p, v.select(1, h)));
  }
  return out.view({s, heads * d});
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// Restores the intra-op thread count a test changes.
struct ThreadCount {
  int saved = at::get_num_threads();
  ~ThreadCount() { at::set_num_threads(saved); }
};

class CpuAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!onednn_linear(at::ones({1, 1}), at::ones({1, 1})))
      GTEST_SKIP() << "this LibTorch has no oneDNN linear operators: attention takes the fused kernel";
  }
};

TEST_F(CpuAttention, MatchesTheFullSoftmaxOverBlocksOfEverySize) {
  at::manual_seed(3);
  const struct {
    int64_t s, sk, heads, d, max_score_elements;
  } cases[] = {
      {70, 70, 3, 16, 16 * 70},             // 16-row blocks: 5, the last partial
      {70, 70, 3, 16, int64_t(1) << 22},    // one block of every row
      {5, 5, 1, 8, int64_t(1) << 22},       // fewer rows than the smallest block
      {40, 93, 2, 32, 16 * 93},             // more keys than queries: a chunk over cached rows
      {600, 600, 2, 64, int64_t(1) << 22},  // 512-row blocks: two, the second partial
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.s << " queries, " << c.sk << " keys, " << c.heads << " heads of "
                                      << c.d << ", " << c.max_score_elements << " score elements");
    const at::Tensor q = at::randn({c.s, c.heads, c.d}, at::kDouble);
    const at::Tensor k = at::randn({c.sk, c.heads, c.d}, at::kDouble);
    const at::Tensor v = at::randn({c.sk, c.heads, c.d}, at::kDouble);
    const at::Tensor qf = q.to(at::kFloat), kf = k.to(at::kFloat), vf = v.to(at::kFloat);
    const ScopedCpuKernels gemm_blocks(at::kFloat, gemm_block_kernels());  // whatever this CPU chose
    ASSERT_TRUE(cpu_attention_applies(qf, kf, vf));
    const at::Tensor got = cpu_attention(qf, kf, vf, c.max_score_elements);
    ASSERT_EQ(got.sizes(), (std::vector<int64_t>{c.s, c.heads * c.d}));
    EXPECT_LE(max_abs_diff(got, reference(q, k, v)), 1e-5);
    // The inputs are left as they were (one head's transposed q is contiguous: no scaling in place).
    EXPECT_TRUE(at::equal(qf, q.to(at::kFloat)) && at::equal(kf, k.to(at::kFloat)) &&
                at::equal(vf, v.to(at::kFloat)));
    // A strided q (its rows interleaved with another tensor's) reads the same.
    const at::Tensor wide = at::cat({qf, at::zeros_like(qf)}, 2).narrow(2, 0, c.d);
    EXPECT_TRUE(at::equal(cpu_attention(wide, kf, vf, c.max_score_elements), got));
  }
}

// The causal form (the text encoder's): query i against keys 0..i, over blocks of every size (the
// masked square of a block's own keys, partial last blocks), the same bits at any thread count.
TEST_F(CpuAttention, TheCausalFormMatchesTheMaskedSoftmaxAtAnyThreadCount) {
  ThreadCount restore;
  at::manual_seed(6);
  const struct {
    int64_t s, heads, d, max_score_elements;
  } cases[] = {{70, 3, 16, 16 * 70},
               {70, 3, 16, int64_t(1) << 22},
               {5, 1, 8, int64_t(1) << 22},
               {600, 2, 64, int64_t(1) << 22},
               {600, 2, 64, 100 * 600}};
  const ScopedCpuKernels gemm_blocks(at::kFloat, gemm_block_kernels());
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.s << " rows, " << c.heads << " heads of " << c.d << ", "
                                      << c.max_score_elements << " score elements");
    const at::Tensor q = at::randn({c.s, c.heads, c.d}, at::kDouble);
    const at::Tensor k = at::randn({c.s, c.heads, c.d}, at::kDouble);
    const at::Tensor v = at::randn({c.s, c.heads, c.d}, at::kDouble);
    const at::Tensor qf = q.to(at::kFloat), kf = k.to(at::kFloat), vf = v.to(at::kFloat);
    at::set_num_threads(1);
    const at::Tensor got = cpu_causal_attention(qf, kf, vf, c.max_score_elements);
    ASSERT_EQ(got.sizes(), (std::vector<int64_t>{c.s, c.heads * c.d}));
    EXPECT_LE(max_abs_diff(got, reference(q, k, v, true)), 1e-5);
    EXPECT_GT(max_abs_diff(got, reference(q, k, v, false)), 1e-2) << "the mask changed nothing";
    for (int threads : {2, 3}) {
      at::set_num_threads(threads);
      EXPECT_TRUE(at::equal(cpu_causal_attention(qf, kf, vf, c.max_score_elements), got))
          << threads << " threads";
    }
  }
}

// No GEMM is split across threads: the output's bits do not depend on the intra-op thread count
// (thread ranks and process ranks of one world, which run different counts, agree). Here at 64-row
// blocks and at the medium model's 3658 rows of 128-wide heads (512-row blocks).
TEST_F(CpuAttention, GivesTheSameBitsAtAnyThreadCount) {
  ThreadCount restore;
  at::manual_seed(4);
  const struct {
    int64_t rows, heads, d, max_score_elements;
  } cases[] = {{300, 4, 32, 64 * 300}, {3658, 2, 128, int64_t(1) << 22}};
  for (const auto& c : cases) {
    const at::Tensor q = at::randn({c.rows, c.heads, c.d}), k = at::randn({c.rows, c.heads, c.d});
    const at::Tensor v = at::randn({c.rows, c.heads, c.d});
    at::set_num_threads(1);
    const at::Tensor one = cpu_attention(q, k, v, c.max_score_elements);
    for (int threads : {2, 3, 4}) {
      at::set_num_threads(threads);
      EXPECT_TRUE(at::equal(cpu_attention(q, k, v, c.max_score_elements), one))
          << c.rows << " rows, " << threads << " threads";
    }
  }
}

TEST(CpuAttentionBlocks, RowsPerBlockKeepTheScoresWithinTheBound) {
  const int64_t bound = int64_t(1) << 22;
  EXPECT_EQ(cpu_attention_block_rows(3658, 3658, bound), 512);     // past 512 the GEMMs gain nothing
  EXPECT_EQ(cpu_attention_block_rows(73000, 73000, bound), 57);    // 57 x 73000 <= 4 Mi elements
  EXPECT_EQ(cpu_attention_block_rows(500000, 500000, bound), 16);  // never under 16 rows
  EXPECT_EQ(cpu_attention_block_rows(10, 3658, bound), 10);        // never over the queries
  EXPECT_EQ(cpu_attention_block_rows(100, 100, 16 * 100), 16);
  // One block per thread, while there are tasks for them: 4 heads x 8 blocks at 3658 rows.
  EXPECT_EQ(cpu_attention_score_bytes(3658, 3658, 4, bound, 2), 2 * 512 * 3658 * 4);
  EXPECT_EQ(cpu_attention_score_bytes(3658, 3658, 4, bound, 100), 32 * 512 * 3658 * 4);
  EXPECT_EQ(cpu_attention_score_bytes(10, 3658, 1, bound, 4), 10 * 3658 * 4);
}

TEST(CpuAttentionBlocks, AppliesToFp32AndBf16WhereTheChoiceSaysSo) {
  const at::Tensor f = at::ones({4, 2, 8}), b = f.to(at::kBFloat16), d = f.to(at::kDouble);
  CpuKernels sdpa = gemm_block_kernels();
  sdpa.attention = AttentionPath::kFusedSdpa;
  {
    const ScopedCpuKernels fp32_blocks(at::kFloat, gemm_block_kernels());  // an AVX2 CPU's choice
    const ScopedCpuKernels bf16_fused(at::kBFloat16, sdpa);                // an AMX CPU's
    EXPECT_FALSE(cpu_attention_applies(b, b, b));
    EXPECT_FALSE(cpu_attention_applies(d, d, d));
    EXPECT_FALSE(cpu_attention_applies(f, f, b));
    EXPECT_FALSE(cpu_attention_applies(f.view({4, 16}), f.view({4, 16}), f.view({4, 16})));
    EXPECT_EQ(cpu_attention_applies(f, f, f), onednn_linear(f.select(1, 0), f.select(1, 0)));
  }
  {
    const ScopedCpuKernels fp32_fused(at::kFloat, sdpa);                      // an Intel AVX-512 CPU's
    const ScopedCpuKernels bf16_blocks(at::kBFloat16, gemm_block_kernels());  // AVX512_BF16 without AMX
    EXPECT_FALSE(cpu_attention_applies(f, f, f));
    EXPECT_EQ(cpu_attention_applies(b, b, b), onednn_linear(f.select(1, 0), f.select(1, 0)));
  }
}

// bf16 in the GEMM blocks (the choice of an AVX512_BF16 CPU without AMX): its scores rounded to
// bf16 where the fused kernel sums them in fp32, so about 2-5x the fused kernel's distance from
// the fp64 reference (printed; 0.0056 against 0.0023 at 70 rows, measured on a Zen 5), and within
// 1.6 % of max |out| (the release-precision bound of tests/core/dit/golden_test.cpp).
TEST_F(CpuAttention, Bf16BlocksStayWithinTheReleaseBoundOfTheReference) {
  const CpuFeatures& cpu = cpu_features();
  if (!cpu.avx512 && !cpu.amx_bf16) GTEST_SKIP() << "LibTorch refuses oneDNN's bf16 linear on this CPU";
  at::manual_seed(5);
  const ScopedCpuKernels bf16_blocks(at::kBFloat16, gemm_block_kernels());
  for (int64_t rows : {70, 600}) {
    const at::Tensor q = at::randn({rows, 2, 64}, at::kDouble), k = at::randn({rows, 2, 64}, at::kDouble),
                     v = at::randn({rows, 2, 64}, at::kDouble);
    const at::Tensor qb = q.to(at::kBFloat16), kb = k.to(at::kBFloat16), vb = v.to(at::kBFloat16);
    // The reference of the rounded inputs: what is left is the attention's own rounding.
    const at::Tensor ref = reference(qb.to(at::kDouble), kb.to(at::kDouble), vb.to(at::kDouble));
    ASSERT_TRUE(cpu_attention_applies(qb, kb, vb));
    const at::Tensor blocks = cpu_attention(qb, kb, vb, int64_t(1) << 22);
    const at::Tensor fused =
        at::scaled_dot_product_attention(qb.transpose(0, 1).unsqueeze(0), kb.transpose(0, 1).unsqueeze(0),
                                         vb.transpose(0, 1).unsqueeze(0))
            .squeeze(0)
            .transpose(0, 1)
            .reshape({rows, 2 * 64});
    const double d_blocks = max_abs_diff(blocks, ref), d_fused = max_abs_diff(fused, ref);
    std::printf("%lld rows: bf16 GEMM blocks max |diff| %.4g, fused kernel %.4g (of max |out| %.3g)\n",
                static_cast<long long>(rows), d_blocks, d_fused, ref.abs().max().item<double>());
    EXPECT_GT(d_blocks, 0.0);
    EXPECT_LE(d_blocks, 0.016 * ref.abs().max().item<double>()) << rows << " rows";
  }
}

}  // namespace
}  // namespace h3
