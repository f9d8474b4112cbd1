// The video VAE encoder against diffusers' AutoencoderKLMiniMaxH3 (tests/data/vae_encoder, made by
// bench/reference/make_vae_encoder_vectors.py): the posterior parameters, the seeded sample and the
// normalised conditioning latents of the image path (one tile and 2 x 2 tiles) and of 17-, 22- and
// 34-frame clips (one with 2 tiles); the normalisation alone; the errors for bad inputs.
#include "vae/encoder.h"

#include <ATen/ATen.h>
#include <ATen/Version.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "common/device.h"
#include "common/shape.h"
#include "dist/group.h"
#include "dist/world.h"
#include "h3/error.h"
#include "io/safetensors.h"
#include "posterior_parity.h"
#include "vae/encoder_tensors.h"

namespace {

namespace fs = std::filesystem;
using h3::vae::EncodeOptions;
using h3::vae::VideoEncoder;

std::string data(const std::string& rel) {
  const char* root = std::getenv("H3_TEST_DATA");
  return std::string(root ? root : "tests/data") + "/vae_encoder/" + rel;
}

// fp32(exp(x)) for the fp32 x = 0.5 * clamp(logvar, -30, 20), exp taken in double by the C library
// (not through ATen): the correctly rounded fp32 sd, but where the double lies within its own error of
// an fp32 rounding midpoint (a chance of about 2^-28 a value).
at::Tensor exact_sd(const at::Tensor& logvar) {
  const at::Tensor x = (0.5 * at::clamp(logvar, -30.0, 20.0)).contiguous();
  at::Tensor sd = at::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* out = sd.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = static_cast<float>(std::exp(static_cast<double>(in[i])));
  return sd;
}

double max_err(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes()) return INFINITY;
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

class VaeEncoderGolden : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { enc_ = new VideoEncoder(VideoEncoder::load(data("vae"))); }
  static void TearDownTestSuite() {
    delete enc_;
    enc_ = nullptr;
  }
  static VideoEncoder* enc_;
};
VideoEncoder* VaeEncoderGolden::enc_ = nullptr;

TEST_P(VaeEncoderGolden, MatchesDiffusers) {
  const auto file = h3::io::SafetensorsFile::open(data("case_" + GetParam() + ".safetensors"));
  const at::Tensor pixels = file->view("pixels_u8");  // [3, T, H, W] uint8
  const at::Tensor want_moments = file->view("moments"), want_sample = file->view("sample");
  const at::Tensor want = file->view("latents");
  const VideoEncoder& e = *enc_;

  // Posterior parameters (encoder + quant_conv, clips, token drop, tiles).
  const at::Tensor m = e.moments(pixels);
  const double err_m = max_err(m, want_moments);
  EXPECT_LE(err_m, 1e-4);
  EXPECT_EQ(m.size(2), e.latent_frames(pixels.size(1)));

  // The posterior noise: the engine's draw for these moments (a zero mean and logvar give the noise
  // itself, 0 + exp(0) * n) rebuilds the reference's sample bit for bit as mean + sd * noise (two fp32
  // roundings, as the reference's), sd within one ulp of exp(0.5 * clamp(logvar)): the correctly
  // rounded fp32 value or a neighbour. fp32 exp is that accurate on every path (MKL's VML in HA mode,
  // Sleef's u10), and its paths, picked by CPU vendor and ISA, differ within it (docs/vae.md, "Parity
  // across CPUs"); a noise drawn in another order or from another seed rebuilds nothing.
  const std::vector<at::Tensor> parts = want_moments.chunk(2, 1);
  const at::Tensor& ref_mean = parts[0];
  const at::Tensor noise = VideoEncoder::sample_posterior(at::zeros_like(want_moments), 42);
  const at::Tensor sd = exact_sd(parts[1]);
  const at::Tensor exact = ref_mean + sd * noise;
  const at::Tensor below = ref_mean + at::nextafter(sd, at::zeros_like(sd)) * noise;
  const at::Tensor above = ref_mean + at::nextafter(sd, at::full_like(sd, INFINITY)) * noise;
  auto rebuilt = [&](const at::Tensor& sample) {
    return sample.eq(exact) | sample.eq(below) | sample.eq(above);
  };
  const at::Tensor not_rebuilt = ~rebuilt(want_sample);
  EXPECT_EQ(not_rebuilt.sum().item<int64_t>(), 0)
      << "the posterior noise differs from torch.Generator().manual_seed(42): these values of the "
         "reference's sample are not rebuilt from its moments and our noise (ATen's CPU capability here: "
      << at::get_cpu_capability()
      << "; the vectors' noise is ATen's AVX2 normal_fill, which AVX2 and AVX-512 share: the DEFAULT "
         "capability's scalar Box-Muller rounds differently)";
  const int64_t inexact = want_sample.ne(exact).sum().item<int64_t>();  // its exp not correctly rounded

  // The sample from the reference's moments: the same, with our exp (ATen's fp32 exp, as the
  // reference's); it equals the reference's sample where both exps round alike.
  const at::Tensor ours = VideoEncoder::sample_posterior(want_moments, 42);
  const at::Tensor ours_not_rebuilt = ~rebuilt(ours);
  EXPECT_EQ(ours_not_rebuilt.sum().item<int64_t>(), 0)
      << "these values of the sample from the reference's moments are not mean + sd * noise with sd "
         "within one ulp of exp(0.5 * clamp(logvar))";
  const double err_ref = max_err(ours, want_sample);
  const int64_t ulp_off = ours.ne(want_sample).sum().item<int64_t>();

  // The sample from our moments: within what the encoder's convolutions leave between CPUs.
  const double err_s = max_err(VideoEncoder::sample_posterior(m, 42), want_sample);
  EXPECT_LE(err_s, h3::test::kSampleTolerance);

  // The normalisation alone: the reference's sample, rounded to fp16, gives its latents bit for bit.
  EXPECT_TRUE(at::equal(e.normalize(want_sample.to(at::kHalf).to(at::kFloat)), want));

  // End to end (uint8 pixels; the image path takes [3, H, W]): the fp16 rounding of a sample within
  // kSampleTolerance of the reference's unrounded one, i.e. its latents bit for bit except where an
  // fp16 rounding midpoint lies that close to the reference's sample (one fp16 step there).
  const at::Tensor z = pixels.size(1) == 1 ? e.encode_image(pixels.select(1, 0)) : e.encode_clip(pixels);
  ASSERT_EQ(z.sizes(), want.sizes());
  const int64_t flipped =
      h3::test::expect_fp16_rounding_of(e, z, want_sample, h3::test::kSampleTolerance, GetParam());
  const int64_t boundaries = h3::test::fp16_boundaries(e, want_sample, h3::test::kSampleTolerance);

  // [0, 1] floats are the same input as uint8.
  const at::Tensor unit = pixels.to(at::kFloat).div(255.0);
  const at::Tensor z2 = pixels.size(1) == 1 ? e.encode_image(unit.select(1, 0)) : e.encode_clip(unit);
  EXPECT_TRUE(at::equal(z, z2));

  // The posterior mean (sample = false) is the first half of the moments, normalised.
  EncodeOptions mean_only;
  mean_only.sample = false;
  mean_only.round_fp16 = false;
  const double err_mean = max_err(e.encode_clip(pixels, mean_only), e.normalize(want_moments.chunk(2, 1)[0]));
  EXPECT_LE(err_mean, 1e-4);

  std::printf(
      "[ encoder ] %s: moments %s max |err| %.3g, sample %.3g (from the reference's moments: %.3g, at "
      "%lld values; its exp not correctly rounded at %lld of %lld), latents %.3g (%lld of %lld differ, "
      "%lld within %.0e of an fp16 midpoint), mean %.3g\n",
      GetParam().c_str(), h3::shape_string(m.sizes()).c_str(), err_m, err_s, err_ref,
      static_cast<long long>(ulp_off), static_cast<long long>(inexact),
      static_cast<long long>(want_sample.numel()), max_err(z, want), static_cast<long long>(flipped),
      static_cast<long long>(z.numel()), static_cast<long long>(boundaries), h3::test::kSampleTolerance,
      err_mean);
}

INSTANTIATE_TEST_SUITE_P(VaeEncoderCases, VaeEncoderGolden,
                         ::testing::Values("image_h48w80", "image_h288w320", "clip17_h32w48", "clip34_h32w48",
                                           "clip22_h32w48", "clip17_h32w272"));

// to() moves every tensor the encoder declares and leaves the original where it was (the meta
// device: shapes without data; LibTorch has no meta convolution, so the encode itself on another
// device is VaeEncoderCuda's, where a GPU is).
TEST_F(VaeEncoderGolden, ToMovesEveryDeclaredTensor) {
  const VideoEncoder meta = enc_->to(c10::Device(c10::kMeta));
  EXPECT_TRUE(meta.device().is_meta());
  EXPECT_TRUE(enc_->device().is_cpu());
  h3::vae::EncoderWeights moved = meta.weights(), kept = enc_->weights();
  for (const h3::vae::EncoderTensor& d : h3::vae::encoder_tensors(meta.config())) {
    EXPECT_TRUE(d.slot(moved).is_meta()) << d.name;
    EXPECT_TRUE(d.slot(kept).device().is_cpu()) << d.name;
    EXPECT_EQ(d.slot(moved).sizes(), d.slot(kept).sizes()) << d.name;
  }
}

// The encoder on a GPU (weights moved with to(); the posterior noise still from the CPU
// generator): the reference's latents within what cuDNN's TF32 convolutions (PyTorch's default,
// the reference's too on a GPU) leave, one case per path. Skipped where no GPU is usable.
TEST(VaeEncoderCuda, MatchesDiffusersOnTheGpu) {
  if (h3::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA GPU usable here (a CPU-only build, no driver or no GPU)";
  const VideoEncoder gpu = VideoEncoder::load(data("vae")).to(c10::Device(c10::kCUDA, 0));
  EXPECT_TRUE(gpu.device().is_cuda());
  for (const std::string name : {"image_h288w320", "clip22_h32w48", "clip17_h32w272"}) {
    const auto file = h3::io::SafetensorsFile::open(data("case_" + name + ".safetensors"));
    const at::Tensor pixels = file->view("pixels_u8");
    const at::Tensor want_m = file->view("moments"), want = file->view("latents");
    const at::Tensor m = gpu.moments(pixels);
    EXPECT_TRUE(m.is_cuda()) << name;
    const double scale_m = std::max(1.0, want_m.abs().max().item<double>());
    EXPECT_LE(max_err(m.cpu(), want_m), 1e-2 * scale_m) << name;
    const at::Tensor z =
        pixels.size(1) == 1 ? gpu.encode_image(pixels.select(1, 0)) : gpu.encode_clip(pixels);
    const double scale = std::max(1.0, want.abs().max().item<double>());
    EXPECT_LE(max_err(z.cpu(), want), 1e-2 * scale) << name;
  }
}

// Tiles spread over 2 and 3 rank threads give the single-rank latents bit for bit (3 ranks on the
// 2-tile clip: fewer tiles than ranks, every rank encodes both).
TEST_F(VaeEncoderGolden, RanksGiveTheSameLatents) {
  for (const std::string name : {"image_h288w320", "clip17_h32w272"}) {
    const auto file = h3::io::SafetensorsFile::open(data("case_" + name + ".safetensors"));
    const at::Tensor pixels = file->view("pixels_u8");
    const bool image = pixels.size(1) == 1;
    const at::Tensor want = image ? enc_->encode_image(pixels.select(1, 0)) : enc_->encode_clip(pixels);
    for (int ranks : {2, 3}) {
      std::vector<at::Tensor> got(static_cast<size_t>(ranks));
      const auto results = h3::dist::run_threads(ranks, [&](h3::dist::Group& g) {
        got[static_cast<size_t>(g.rank())] =
            image ? enc_->encode_image(pixels.select(1, 0), g) : enc_->encode_clip(pixels, g);
      });
      for (const auto& r : results) EXPECT_TRUE(r.ok) << name << " rank " << r.rank << ": " << r.error;
      for (const at::Tensor& z : got) {
        ASSERT_TRUE(z.defined()) << name;
        EXPECT_TRUE(at::equal(z, want)) << name << ", " << ranks << " ranks";
      }
    }
  }
  // A bad input fails every rank together (nobody waits in a gather).
  const auto results = h3::dist::run_threads(2, [&](h3::dist::Group& g) {
    enc_->encode_image(at::zeros({3, 40, 48}, at::kByte), g);
  });
  for (const auto& r : results) EXPECT_FALSE(r.ok);
}

TEST(VaeEncoder, ReadsTheEncoderConfig) {
  const VideoEncoder e = VideoEncoder::load(data("vae"));
  const auto& c = e.config();
  EXPECT_EQ(c.encoder_channels, (std::vector<int64_t>{8, 16, 16, 16, 24, 24}));
  EXPECT_EQ(c.encoder_spatial_down, (std::vector<int64_t>{2, 2, 2, 2, 1, 1}));
  EXPECT_EQ(c.encoder_temporal_down, (std::vector<int64_t>{1, 2, 2, 1, 1, 1}));
  EXPECT_EQ(c.encoder_layers_per_block, 2);
  EXPECT_EQ(c.encoder_norm_groups, 4);
  EXPECT_DOUBLE_EQ(c.encoder_norm_eps, 1e-6);
  EXPECT_EQ(c.encoder_padding_mode, "reflect");
  EXPECT_EQ(e.latent_frames(1), 1);
  EXPECT_EQ(e.latent_frames(17), 2);
  EXPECT_EQ(e.latent_frames(22), 7);
  EXPECT_EQ(e.latent_frames(34), 7);
  EXPECT_EQ(e.latent_frames(124), 37);
}

// Throws h3::Error(kInvalidArgument) whose message holds every one of `words`.
template <typename F>
void expect_refused(F&& f, std::initializer_list<const char*> words) {
  try {
    f();
    ADD_FAILURE() << "not refused";
  } catch (const h3::Error& err) {
    EXPECT_EQ(err.kind(), h3::ErrorKind::kInvalidArgument) << err.what();
    for (const char* w : words) EXPECT_NE(std::string(err.what()).find(w), std::string::npos) << err.what();
  }
}

TEST(VaeEncoder, BadInputsAreRefusedWithWhatToDo) {
  const VideoEncoder e = VideoEncoder::load(data("vae"));
  const auto u8 = at::TensorOptions().dtype(at::kByte);
  expect_refused(
      [&] {
        e.encode_image(at::zeros({4, 32, 32}, u8));
      },
      {"image", "[4, 32, 32]", "3 colour channels"});
  expect_refused([&] { e.encode_image(at::zeros({32, 48, 3}, u8)); }, {"image", "[32, 48, 3]", "permute"});
  expect_refused([&] { e.encode_clip(at::zeros({1, 17, 32, 32}, u8)); }, {"video", "3 colour channels"});
  expect_refused(
      [&] {
        e.encode_image(at::zeros({3, 40, 48}, u8));
      },
      {"image", "40 x 48", "multiples of 16", "resize"});
  expect_refused([&] { e.encode_clip(at::zeros({3, 17, 32, 56})); }, {"video", "32 x 56", "multiples of 16"});
  expect_refused([&] { e.encode_image(at::zeros({3, 1, 1}, u8)); }, {"image", "1 x 1", "at least 32 px"});
  expect_refused([&] { e.encode_image(at::zeros({3, 16, 16}, u8)); }, {"image", "16 x 16", "at least 32 px"});
  expect_refused([&] { e.encode_image(at::zeros({1, 3, 32, 32}, u8)); }, {"image", "[3, H, W]"});
  expect_refused([&] { e.encode_clip(at::zeros({3, 32, 32}, u8)); }, {"video", "[3, T, H, W]"});
  expect_refused([&] { e.encode_image(at::zeros({3, 32, 32}, at::kInt)); }, {"image", "uint8"});
}

TEST(VaeEncoder, AVaeWithoutEncoderIsNamed) {
  // The tiny decoders of the tests ship no encoder (tests/data/golden/h3_vae/diffusers).
  const char* root = std::getenv("H3_TEST_DATA");
  const std::string dir = std::string(root ? root : "tests/data") + "/golden/h3_vae/diffusers";
  try {
    VideoEncoder::load(dir);
    FAIL() << "loaded an encoder from " << dir;
  } catch (const h3::Error& err) {
    EXPECT_EQ(err.kind(), h3::ErrorKind::kNotFound);
    EXPECT_NE(std::string(err.what()).find("no encoder"), std::string::npos) << err.what();
  }
}

}  // namespace

namespace {

// The release's two config layouts describe the same encoder (docs/h3-model.md §7.6).
TEST(VaeEncoder, ReleaseConfigsAgree) {
  const char* root = std::getenv("H3_TEST_DATA");
  const std::string base = std::string(root ? root : "tests/data") + "/h3-release/";
  const auto diffusers = h3::vae::find_vae(base + "vae").config;
  const auto native = h3::vae::find_vae(base + "FL2VA/video_vae").config;
  for (const auto* c : {&diffusers, &native}) {
    c->validate_encoder("release");
    EXPECT_EQ(c->encoder_channels, (std::vector<int64_t>{128, 256, 256, 512, 512, 1024}));
    EXPECT_EQ(c->encoder_spatial_down, (std::vector<int64_t>{2, 2, 2, 2, 1, 1}));
    EXPECT_EQ(c->encoder_temporal_down, (std::vector<int64_t>{1, 2, 2, 1, 1, 1}));
    EXPECT_EQ(c->encoder_layers_per_block, 2);
    EXPECT_EQ(c->encoder_norm_groups, 32);
    EXPECT_DOUBLE_EQ(c->encoder_norm_eps, 1e-6);
    EXPECT_EQ(c->encoder_padding_mode, "reflect");
    EXPECT_TRUE(c->encoder_tiling);
    EXPECT_EQ(c->in_channels, 3);
  }
}

}  // namespace
