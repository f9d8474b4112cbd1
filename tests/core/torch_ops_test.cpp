// The LibTorch the project links computes what the engine relies on: BLAS
// matmul, softmax, bf16 rounding and the CPU generator's normal draws.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

TEST(TorchOps, MatmulMatchesHandValues) {
  auto a = at::arange(6, at::kFloat).reshape({2, 3});  // [[0,1,2],[3,4,5]]
  auto b = at::arange(6, at::kFloat).reshape({3, 2});  // [[0,1],[2,3],[4,5]]
  auto c = at::matmul(a, b);
  ASSERT_EQ(c.sizes(), (at::IntArrayRef{2, 2}));
  EXPECT_FLOAT_EQ(c[0][0].item<float>(), 10.f);
  EXPECT_FLOAT_EQ(c[0][1].item<float>(), 13.f);
  EXPECT_FLOAT_EQ(c[1][0].item<float>(), 28.f);
  EXPECT_FLOAT_EQ(c[1][1].item<float>(), 40.f);
}

TEST(TorchOps, SoftmaxRowsSumToOne) {
  auto x = at::tensor({1.f, 2.f, 3.f});
  auto y = at::softmax(x, 0);
  EXPECT_NEAR(y.sum().item<float>(), 1.f, 1e-6);
  EXPECT_NEAR(y[2].item<float>(), std::exp(3.f) / (std::exp(1.f) + std::exp(2.f) + std::exp(3.f)), 1e-6);
}

TEST(TorchOps, Bf16KeepsEightMantissaBits) {
  // 1 + 2^-8 is not representable in bf16 (7 stored mantissa bits): it rounds to 1.
  auto x = at::tensor({1.f + 1.f / 256.f, 1.f + 1.f / 128.f});
  auto y = x.to(at::kBFloat16).to(at::kFloat);
  EXPECT_EQ(y[0].item<float>(), 1.f);
  EXPECT_EQ(y[1].item<float>(), 1.f + 1.f / 128.f);
}

TEST(TorchOps, SeededGeneratorIsDeterministic) {
  auto g1 = at::make_generator<at::CPUGeneratorImpl>(42);
  auto g2 = at::make_generator<at::CPUGeneratorImpl>(42);
  auto a = at::randn({16}, g1, at::kFloat);
  auto b = at::randn({16}, g2, at::kFloat);
  EXPECT_TRUE(at::equal(a, b));
  auto c = at::randn({16}, g1, at::kFloat);
  EXPECT_FALSE(at::equal(a, c));
}
