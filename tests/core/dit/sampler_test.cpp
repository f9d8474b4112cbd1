// The sampler: grid formula, the Euler step on hand values, noise determinism.
#include "dit/sampler.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "h3/error.h"

namespace h3::dit {
namespace {

TEST(Sampler, GridFollowsTheShiftedLinspaceFormula) {
  for (int64_t n : {2, 3, 4, 9, 20}) {
    for (double shift : {1.0, 3.0, 12.0}) {
      auto s = make_schedule(n, shift);
      ASSERT_EQ(s.sigmas.size(0), n);
      ASSERT_EQ(s.evaluations(), n - 1);
      for (int64_t i = 0; i < n; ++i) {
        const double b = 1.0 - static_cast<double>(i) / static_cast<double>(n - 1);
        const double want = shift * b / (1 + (shift - 1) * b);
        EXPECT_NEAR(s.sigmas[i].item<float>(), want, 2e-7) << n << " " << shift << " " << i;
        if (i + 1 < n) {
          EXPECT_EQ(s.timesteps[i].item<float>(), 1.0f - s.sigmas[i].item<float>());
        }
      }
      EXPECT_EQ(s.sigmas[0].item<float>(), 1.0f);
      EXPECT_EQ(s.sigmas[n - 1].item<float>(), 0.0f);
    }
  }
  EXPECT_THROW(make_schedule(1, 12.0), Error);
}

TEST(Sampler, EulerStepOnHandValues) {
  // x = 1, v = 2 at t = 0.25 (sigma 0.75): x0 = 1 + 0.75 * 2 = 2.5; r = 0.5 / 0.75 = 2/3;
  // x_next = 2/3 * 1 + 1/3 * 2.5 = 1.5.
  auto x = at::ones({3});
  auto v = at::full({3}, 2.0f);
  auto y = euler_step(x, v, 0.25f, 0.75f, 0.5f);
  EXPECT_NEAR(y[0].item<float>(), 1.5f, 1e-6);
  // The last step (sigma_next = 0) lands on x0 exactly.
  auto last = euler_step(x, v, 0.25f, 0.75f, 0.0f);
  EXPECT_FLOAT_EQ(last[1].item<float>(), 2.5f);
  // t = 1 - sigma recovers the clean sample without moving when v = 0.
  EXPECT_TRUE(at::allclose(euler_step(x, at::zeros({3}), 0.5f, 0.5f, 0.25f), x));
}

TEST(Sampler, SameSeedSameNoiseOtherSeedOther) {
  auto a = draw_noise(1234, {1, 24, 7, 4, 6}, {74, 32});
  auto b = draw_noise(1234, {1, 24, 7, 4, 6}, {74, 32});
  auto c = draw_noise(1235, {1, 24, 7, 4, 6}, {74, 32});
  EXPECT_TRUE(at::equal(a.video, b.video));
  EXPECT_TRUE(at::equal(a.audio, b.audio));
  EXPECT_FALSE(at::equal(a.video, c.video));
  EXPECT_FALSE(at::equal(a.audio, c.audio));
  // Audio is drawn after the video from the same stream, not from a fresh generator.
  auto fresh = draw_noise(1234, {74, 32}, {1});
  EXPECT_FALSE(at::equal(a.audio, fresh.video));
  EXPECT_EQ(a.video.scalar_type(), at::kFloat);
}

}  // namespace
}  // namespace h3::dit
