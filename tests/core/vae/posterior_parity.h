// The posterior sample and the fp16 conditioning latents against a reference made on another CPU
// (docs/vae.md "Encoder", "Parity across CPUs"): what may differ, and by how much, is stated here once
// for the encoder's golden test and the FL2VA / Ref2VA parity tests.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "vae/encoder.h"

namespace h3::test {

// The most our unrounded posterior sample may differ from a reference's made on another CPU, in the
// sample's own (unnormalised) units. The encoder's fp32 convolutions round differently with the BLAS
// kernels each ISA gets: measured 1.2e-6 to 2.3e-6 on the moments and 1.3e-6 to 2.9e-6 on the
// sample against diffusers' vectors under MKL's SSE4.2, AVX2 and AVX-512 paths; 1e-5 keeps a margin
// over 3 and stays far under an fp16 step at the latents' magnitudes (2^-10 at 1: 9.8e-4).
constexpr double kSampleTolerance = 1e-5;

// The normalised fp16 values a sample within `tolerance` of `sample` rounds to: lo and hi elementwise
// (fp16 rounding and the normalisation are both monotonic). They are equal, and the fp16 rounding of
// `sample` itself, wherever no fp16 rounding midpoint lies within `tolerance` of the sample.
struct Fp16Range {
  at::Tensor lo, hi;
};

inline Fp16Range fp16_range(const vae::VideoEncoder& e, const at::Tensor& sample, double tolerance) {
  const at::Tensor s = sample.to(at::kFloat);
  auto rounded = [&](const at::Tensor& v) { return e.normalize(v.to(at::kHalf).to(at::kFloat)); };
  return {rounded(s - tolerance), rounded(s + tolerance)};
}

// Expects the normalised fp16 latents `latents` to be the rounding of a sample within `tolerance` of
// `sample`: bit for bit the rounding of `sample` itself wherever no fp16 midpoint lies within
// `tolerance` of it, and elsewhere one of the values [sample - tolerance, sample + tolerance] rounds to
// (two adjacent fp16 values, one fp16 step apart, wherever a step there exceeds 2 * tolerance: for
// 1e-5, wherever |sample| >= 2^-5, whose step is 2^-15 = 3.1e-5; below, values within 2 * tolerance).
// Returns how many of the latents differ from the rounding of `sample`.
inline int64_t expect_fp16_rounding_of(const vae::VideoEncoder& e, const at::Tensor& latents,
                                       const at::Tensor& sample, double tolerance, const std::string& what) {
  const Fp16Range r = fp16_range(e, sample, tolerance);
  EXPECT_EQ(latents.sizes(), r.lo.sizes()) << what;
  if (latents.sizes() != r.lo.sizes()) return -1;
  const at::Tensor outside = latents.lt(r.lo) | latents.gt(r.hi);
  const int64_t bad = outside.sum().item<int64_t>();
  char within[32];
  std::snprintf(within, sizeof within, "%g", tolerance);
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << latents.numel()
                    << " fp16 latents are not the rounding of a sample within " << within
                    << " of the unrounded one (first at flat index "
                    << (bad ? outside.flatten().nonzero()[0].item<int64_t>() : -1) << ")";
  const at::Tensor own = e.normalize(sample.to(at::kFloat).to(at::kHalf).to(at::kFloat));
  return latents.ne(own).sum().item<int64_t>();
}

// How many latents lie where [sample - tolerance, sample + tolerance] holds an fp16 rounding midpoint.
inline int64_t fp16_boundaries(const vae::VideoEncoder& e, const at::Tensor& sample, double tolerance) {
  const Fp16Range r = fp16_range(e, sample, tolerance);
  return r.lo.ne(r.hi).sum().item<int64_t>();
}

// What the FL2VA and Ref2VA parity tests hold of a keyframe's or reference's latents `want` (the
// pipeline's, normalised fp16) and the engine's call on the same pixels `frames` [3, T, H, W] (T = 1:
// an image, through encode_image): ours are the fp16 rounding of our posterior sample, bit for bit,
// and the pipeline's are the rounding of a sample within kSampleTolerance of ours (those vectors hold
// no unrounded sample: ours stands in for it). Says how many differ, how far, and how many lie within
// the tolerance of an fp16 midpoint.
struct ConditioningParity {
  int64_t differ = 0, boundaries = 0, numel = 0;
  double max_diff = 0;
};

inline ConditioningParity expect_conditioning_latents(const vae::VideoEncoder& enc, const at::Tensor& frames,
                                                      const at::Tensor& want, const std::string& what) {
  const at::Tensor z = frames.size(1) == 1 ? enc.encode_image(frames.select(1, 0)) : enc.encode_clip(frames);
  const at::Tensor sample = vae::VideoEncoder::sample_posterior(enc.moments(frames), 42);
  EXPECT_TRUE(at::equal(z, enc.normalize(sample.to(at::kHalf).to(at::kFloat))))
      << what << ": the latents are not the fp16 rounding of the posterior sample, normalised";
  ConditioningParity p;
  p.differ = expect_fp16_rounding_of(enc, want, sample, kSampleTolerance, what);
  p.boundaries = fp16_boundaries(enc, sample, kSampleTolerance);
  p.numel = want.numel();
  if (z.sizes() == want.sizes()) p.max_diff = (z - want).abs().max().item<double>();
  return p;
}

}  // namespace h3::test
