// The CPU attention (common/cpu_attention.h): softmax(q k^T / sqrt(D)) v against an fp64 reference
// over blocks of every size, the same bits at any intra-op thread count, its block sizes, and where
// it applies.
#include "common/cpu_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>

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

// q [S, heads, D], k and v [Sk, heads, D] in fp64 -> [S, heads * D].
at::Tensor reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t s = q.size(0), heads = q.size(1), d = q.size(2);
  at::Tensor out = at::empty({s, heads, d}, at::kDouble);
  for (int64_t h = 0; h < heads; ++h) {
    const at::Tensor p =
        at::softmax(at::matmul(q.select(1, h), k.select(1, h).t()) / std::sqrt(static_cast<double>(d)), -1);
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

TEST(CpuAttentionBlocks, AppliesToFp32OnTheCpuOnly) {
  const at::Tensor f = at::ones({4, 2, 8}), b = f.to(at::kBFloat16), d = f.to(at::kDouble);
  const ScopedCpuKernels gemm_blocks(at::kFloat, gemm_block_kernels());  // the fp32 choice of an AVX2 CPU
  EXPECT_FALSE(cpu_attention_applies(b, b, b));
  EXPECT_FALSE(cpu_attention_applies(d, d, d));
  EXPECT_FALSE(cpu_attention_applies(f, f, b));
  EXPECT_FALSE(cpu_attention_applies(f.view({4, 16}), f.view({4, 16}), f.view({4, 16})));
  EXPECT_EQ(cpu_attention_applies(f, f, f), onednn_linear(f.select(1, 0), f.select(1, 0)));
}

}  // namespace
}  // namespace h3
