// The one-pass row kernels (common/row_norm.h) against the composites they replace, computed in
// fp64: RMSNorm, the AdaLN shift/scale of each span of rows, RMSNorm + rotate-half RoPE per head;
// the same bits at any intra-op thread count; and which inputs they take.
#include "common/row_norm.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace h3 {
namespace {

struct ThreadCount {
  int saved = at::get_num_threads();
  ~ThreadCount() { at::set_num_threads(saved); }
};

at::Tensor rms_fp64(const at::Tensor& x, const at::Tensor& w, double eps) {
  auto xd = x.to(at::kDouble);
  return xd * at::rsqrt(xd.pow(2).mean(-1, true) + eps) * w.to(at::kDouble);
}

// max |a - b| relative to max |b|.
double relative_diff(const at::Tensor& a, const at::Tensor& b) {
  auto bd = b.to(at::kDouble);
  return (a.to(at::kDouble) - bd).abs().max().item<double>() / bd.abs().max().item<double>();
}

TEST(RowNorm, RmsNormMatchesTheCompositeOnEveryRowLength) {
  at::manual_seed(3);
  // Lengths below, at and past the kernel's 16 partial sums, odd ones, the DiT's and the VAE's.
  for (int64_t n : {1, 7, 16, 17, 33, 128, 384, 385}) {
    auto x = at::randn({37, n}) * 3.0 + 0.5;
    auto w = at::randn({n});
    auto y = rms_norm_rows(x, w, 1e-5);
    ASSERT_EQ(y.sizes(), x.sizes()) << n;
    EXPECT_LT(relative_diff(y, rms_fp64(x, w, 1e-5)), 1e-6) << "n = " << n;
  }
  // eps counts: rows of zeros give zeros, rows of tiny values are held down by eps.
  auto tiny = at::full({2, 8}, 1e-4);
  auto y = rms_norm_rows(tiny, at::ones({8}), 1e-2);
  EXPECT_NEAR(y[0][0].item<float>(), 1e-4 / std::sqrt(1e-8 + 1e-2), 1e-9);
  EXPECT_EQ(rms_norm_rows(at::zeros({3, 5}), at::ones({5}), 1e-6).abs().max().item<float>(), 0.0f);
}

TEST(RowNorm, RmsNormTakesNonContiguousInputAndKeepsTheShape) {
  at::manual_seed(4);
  auto x = at::randn({6, 4, 32}).transpose(0, 1);  // [4, 6, 32], not contiguous
  auto w = at::randn({32});
  auto y = rms_norm_rows(x, w, 1e-6);
  ASSERT_EQ(y.sizes(), x.sizes());
  EXPECT_LT(relative_diff(y, rms_fp64(x, w, 1e-6)), 1e-6);
}

TEST(RowNorm, AffineSpansModulateTheirRowsAndLeaveTheRestNormalised) {
  at::manual_seed(5);
  const int64_t rows = 50, n = 48;
  auto x = at::randn({rows, n});
  auto w = at::randn({n});
  auto scale_a = at::randn({n}), shift_a = at::randn({n}), scale_b = at::randn({n}), shift_b = at::randn({n});
  // Rows 0-9 take a, 10-29 b, 30-49 none.
  auto y = rms_norm_affine_rows(x, w, 1e-5, {{0, 10, scale_a, shift_a}, {10, 20, scale_b, shift_b}});
  auto ref = rms_fp64(x, w, 1e-5);
  auto ea = ref.narrow(0, 0, 10) * (scale_a.to(at::kDouble) + 1) + shift_a.to(at::kDouble);
  auto eb = ref.narrow(0, 10, 20) * (scale_b.to(at::kDouble) + 1) + shift_b.to(at::kDouble);
  EXPECT_LT(relative_diff(y.narrow(0, 0, 10), ea), 1e-6);
  EXPECT_LT(relative_diff(y.narrow(0, 10, 20), eb), 1e-6);
  EXPECT_LT(relative_diff(y.narrow(0, 30, 20), ref.narrow(0, 30, 20)), 1e-6);
}

TEST(RowNorm, RopeRotatesTheFirstDimsOfEveryHeadWithItsRowsAngles) {
  at::manual_seed(6);
  const int64_t s = 21, heads = 3, d = 40, r = 24, half = r / 2;
  auto x = at::randn({s, heads, d});
  auto w = at::randn({d});
  auto half_angles = at::randn({s, 1, half}) * 4.0;
  auto angles = at::cat({half_angles, half_angles}, -1);  // as dit::rope_table lays them out
  auto cos = at::cos(angles), sin = at::sin(angles);
  auto y = rms_norm_rope_rows(x, w, 1e-6, cos, sin);
  // The composite: normalise, then rotate-half the first R dims (the rest untouched).
  auto n = rms_fp64(x, w, 1e-6);
  auto xr = n.narrow(-1, 0, r);
  auto rot = at::cat({xr.narrow(-1, half, half).neg(), xr.narrow(-1, 0, half)}, -1);
  auto expected = at::cat({xr * cos.to(at::kDouble) + rot * sin.to(at::kDouble), n.narrow(-1, r, d - r)}, -1);
  ASSERT_EQ(y.sizes(), x.sizes());
  EXPECT_LT(relative_diff(y, expected), 1e-6);
  // A rotation keeps each pair's length: |(y_i, y_i+R/2)| = |(n_i, n_i+R/2)|.
  auto pair_len = [&](const at::Tensor& t) {
    auto td = t.to(at::kDouble);
    return (td.narrow(-1, 0, half).pow(2) + td.narrow(-1, half, half).pow(2)).sqrt();
  };
  EXPECT_LT(relative_diff(pair_len(y), pair_len(n)), 1e-6);
}

TEST(RowNorm, TheSameBitsAtAnyThreadCount) {
  ThreadCount keep;
  at::manual_seed(7);
  auto x = at::randn({2698, 4, 128});
  auto w = at::randn({128});
  auto angles = at::randn({2698, 1, 96});
  auto cos = at::cos(angles), sin = at::sin(angles);
  at::set_num_threads(1);
  auto one = rms_norm_rope_rows(x, w, 1e-5, cos, sin);
  auto one_plain = rms_norm_rows(x.view({2698, 512}), at::ones({512}), 1e-5);
  at::set_num_threads(2);
  EXPECT_TRUE(at::equal(one, rms_norm_rope_rows(x, w, 1e-5, cos, sin)));
  EXPECT_TRUE(at::equal(one_plain, rms_norm_rows(x.view({2698, 512}), at::ones({512}), 1e-5)));
}

TEST(RowNorm, TakesFp32OnTheCpuWithAMatchingWeightOnly) {
  auto x = at::randn({4, 8});
  EXPECT_TRUE(row_norm_applies(x, at::ones({8})));
  EXPECT_FALSE(row_norm_applies(x.to(at::kBFloat16), at::ones({8})));
  EXPECT_FALSE(row_norm_applies(x, at::ones({8}, at::kBFloat16)));
  EXPECT_FALSE(row_norm_applies(x, at::ones({7})));
  EXPECT_FALSE(row_norm_applies(x, at::ones({2, 4})));
  EXPECT_FALSE(row_norm_applies(at::Tensor(), at::ones({8})));
}

}  // namespace
}  // namespace h3
