// Ref2VA's sound against the reference implementations (tests/data/ref2va_pipeline, made by
// bench/reference/ref2va/make_pipeline_vectors.py): the audio VAE's encoder (diffusers'
// AutoencoderKLMiniMaxH3Audio on the tiny model's audio_vae/, its posterior mean and the
// normalised rows the pipeline packs), the resampling onto the VAE's rate (torchaudio's
// Resample, as diffusers calls it), a sound's cut and upmix, and the encoder's errors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../text/text_test_util.h"
#include "audio/audio_encoder.h"
#include "audio/bigvgan.h"
#include "audio/encoder_modules.h"
#include "audio/resample.h"
#include "common/device.h"
#include "engine/stages/reference_frames.h"
#include "engine_test_util.h"
#include "h3/error.h"
#include "io/safetensors.h"

namespace h3 {
namespace {

std::string data(const std::string& rel) {
  const char* root = std::getenv("H3_TEST_DATA");
  return std::string(root ? root : "tests/data") + "/ref2va_pipeline/" + rel;
}

const audio::AudioEncoder& tiny_encoder() {
  static const audio::AudioEncoder e =
      audio::AudioEncoder::load(test::conditioning_model_dir() + "/audio_vae");
  return e;
}

TEST(AudioEncoder, ThePosteriorMeanAndRowsAreTheReferences) {
  const auto t = test::read_tensors(data("audio_encoder.safetensors"));
  const at::Tensor wave = t.at("wave");  // [2, 41000] at 32 kHz: not a whole number of hops
  ASSERT_EQ(tiny_encoder().latents_for(wave.size(1)), t.at("posterior_mean").size(2));
  const at::Tensor mean = tiny_encoder().posterior_mean(wave.unsqueeze(1));
  const double dm = test::max_abs_diff(mean, t.at("posterior_mean"));
  const at::Tensor rows = tiny_encoder().encode(wave);
  const double dr = test::max_abs_diff(rows, t.at("rows"));
  std::printf("audio encoder: max |d posterior mean| = %.3g, |d rows| = %.3g\n", dm, dr);
  EXPECT_EQ(rows.sizes(), t.at("rows").sizes());
  EXPECT_LE(dm, 1e-4);
  EXPECT_LE(dr, 1e-4);
  // Channel-major: the left channel's latents first, then the right's.
  const at::Tensor left = tiny_encoder().encode(at::stack({wave[0], wave[0]}));
  EXPECT_TRUE(
      at::allclose(left.narrow(0, 0, rows.size(0) / 2), rows.narrow(0, 0, rows.size(0) / 2), 1e-5, 1e-5));
}

// to() moves every tensor and keeps the CPU encoder as it was (the meta device: shapes without
// data; LibTorch has no meta convolution, so the encode on another device is OnTheGpu's).
TEST(AudioEncoder, ToMovesEveryDeclaredTensor) {
  const audio::AudioEncoder meta = tiny_encoder().to(c10::Device(c10::kMeta));
  EXPECT_TRUE(meta.device().is_meta());
  EXPECT_TRUE(tiny_encoder().device().is_cpu());
  // Walks the encoder's declaration (the one binding reads) and checks where each tensor lives.
  struct Where {
    bool meta = false;
    int64_t tensors = 0;
    void check(const at::Tensor& t) {
      if (!t.defined()) return;
      ++tensors;
      EXPECT_EQ(t.is_meta(), meta);
    }
    void conv(const audio::ConvSpec&, audio::Conv& c) { check(c.weight), check(c.bias); }
    void snake1d(const std::string&, int64_t, at::Tensor& a) { check(a); }
    void linear(const audio::LinearSpec&, audio::Linear& l) { check(l.weight), check(l.bias); }
    void layer_norm(const std::string&, int64_t, audio::LayerNormWeights& n) {
      check(n.weight), check(n.bias);
    }
    void vector(const std::string&, int64_t, at::Tensor& t) { check(t); }
    void unread(const std::string&, const std::vector<int64_t>&, double) {}
  };
  for (const bool on_meta : {true, false}) {
    audio::EncoderWeights w = (on_meta ? meta : tiny_encoder()).weights();
    Where where{on_meta};
    where.check(w.latents_mean), where.check(w.latents_std);
    audio::declare_encoder_modules(meta.config(), w, where);
    EXPECT_GT(where.tensors, 60) << "on_meta " << on_meta;
  }
}

// The encoder on a GPU gives the reference's posterior mean and rows; the rows come back on the
// CPU. Skipped where no GPU is usable.
TEST(AudioEncoder, OnTheGpu) {
  if (cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA GPU usable here (a CPU-only build, no driver or no GPU)";
  const audio::AudioEncoder gpu = tiny_encoder().to(c10::Device(c10::kCUDA, 0));
  const auto t = test::read_tensors(data("audio_encoder.safetensors"));
  const at::Tensor wave = t.at("wave");
  const at::Tensor mean = gpu.posterior_mean(wave.unsqueeze(1));
  EXPECT_TRUE(mean.is_cuda());
  const double scale = std::max(1.0, t.at("posterior_mean").abs().max().item<double>());
  EXPECT_LE(test::max_abs_diff(mean.cpu(), t.at("posterior_mean")), 1e-2 * scale);
  const at::Tensor rows = gpu.encode(wave);
  EXPECT_TRUE(rows.device().is_cpu());
  EXPECT_LE(test::max_abs_diff(rows, t.at("rows")),
            1e-2 * std::max(1.0, t.at("rows").abs().max().item<double>()));
}

TEST(AudioResample, EachRateIsTorchaudiosResample) {
  const auto t = test::read_tensors(data("resample.safetensors"));
  for (int64_t rate : {8000, 16000, 44100, 48000}) {
    const at::Tensor in = t.at("in_" + std::to_string(rate)), want = t.at("out_" + std::to_string(rate));
    EXPECT_EQ(audio::resampled_length(in.size(1), rate, 32000), want.size(1)) << rate;
    const at::Tensor got = audio::resample(in, rate, 32000);
    ASSERT_EQ(got.sizes(), want.sizes()) << rate;
    const double d = test::max_abs_diff(got, want);
    std::printf("resample %lld -> 32000: max |d| = %.3g\n", static_cast<long long>(rate), d);
    EXPECT_LE(d, 1e-5) << rate;
  }
  // The kernels' size: 320 phases of 459 taps for 44.1 kHz; a rate sharing 1 with 32 kHz, 32,000.
  EXPECT_EQ(audio::resample_kernel_elements(44100, 32000), 320 * 459);
  EXPECT_EQ(audio::resample_kernel_elements(44101, 32000), int64_t{32000} * (2 * 9 + 44101));
  // The VAE's own rate: the samples as they are.
  const at::Tensor same = at::randn({2, 100});
  EXPECT_TRUE(at::equal(audio::resample(same, 32000, 32000), same));
  test::expect_error(
      [] {
        audio::resample(at::zeros({2, 10}), 0, 32000);
      },
      ErrorKind::kInvalidArgument, {"from 0 Hz to 32000 Hz", "positive"});
}

TEST(AudioReferenceSound, IsCutToTheClipUpmixedAndResampled) {
  Audio a;
  a.source = "voice.wav";
  a.rate = 44100;
  a.channels = 1;
  for (int i = 0; i < 66150; ++i) a.samples.push_back(static_cast<float>(std::sin(0.01 * i)));
  const at::Tensor w = normalized_sound(a, 22, 32000);  // int(22 / 24 * 44100) = 40425 kept
  ASSERT_EQ(w.sizes(), (std::vector<int64_t>{2, audio::resampled_length(40425, 44100, 32000)}));
  EXPECT_EQ(w.size(1), 29334);
  EXPECT_TRUE(at::equal(w[0], w[1]));  // mono on both channels
  // Stereo at the VAE's rate: only the cut, channels de-interleaved.
  Audio s;
  s.rate = 32000;
  s.channels = 2;
  for (int i = 0; i < 40000; ++i) {
    s.samples.push_back(static_cast<float>(i));
    s.samples.push_back(static_cast<float>(-i));
  }
  const at::Tensor v = normalized_sound(s, 22, 32000);
  ASSERT_EQ(v.size(1), 29333);  // int(22 / 24 * 32000)
  EXPECT_EQ(v[0][29332].item<float>(), 29332.f);
  EXPECT_EQ(v[1][5].item<float>(), -5.f);
}

// The memory guard's count of the encoder walks the same declaration as the checkpoint.
TEST(AudioEncoder, ItsParameterCountIsTheCheckpoints) {
  const audio::AudioVaeConfig c = tiny_encoder().config();
  int64_t stored = 0;
  for (const auto& named : audio::random_encoder_checkpoint(c, 1)) stored += named.second.numel();
  EXPECT_EQ(audio::encoder_parameters(c), stored);
  EXPECT_EQ(audio::encoder_parameters(audio::AudioVaeConfig{}), 86387232);  // the release's widths (86.4 M)
}

TEST(AudioEncoder, BadInputsAndADecodeOnlyCheckpointAreRefusedNamingThem) {
  test::expect_error(
      [] {
        tiny_encoder().encode(at::zeros({3, 1600}));
      },
      ErrorKind::kInvalidArgument, {"stereo waveform [2, N >= 1]", "[3, 1600]"});
  test::expect_error(
      [] {
        tiny_encoder().encode(at::zeros({2, 0}));
      },
      ErrorKind::kInvalidArgument, {"[2, 0]"});
  // A diffusers-layout audio VAE with the decoder's tensors only.
  test::TempDir d("decode-only-audio-vae");
  const audio::AudioVaeConfig c = tiny_encoder().config();
  nlohmann::json cfg = {{"_class_name", "AutoencoderKLMiniMaxH3Audio"},
                        {"latent_dim", c.latent_dim},
                        {"latent_channels", c.latent_channels},
                        {"decoder_dim", c.decoder_dim},
                        {"decoder_rates", c.decoder_rates},
                        {"decoder_kernel_sizes", c.decoder_kernel_sizes},
                        {"resblock_kernel_sizes", c.resblock_kernel_sizes},
                        {"resblock_dilation_sizes", c.resblock_dilation_sizes},
                        {"encoder_dim", c.encoder_dim},
                        {"num_attention_heads", c.num_attention_heads},
                        {"sampling_rate", c.sample_rate},
                        {"latents_mean", c.latents_mean},
                        {"latents_std", c.latents_std}};
  std::ofstream(d / "config.json") << cfg.dump();
  io::write_safetensors(d / "diffusion_pytorch_model.safetensors", audio::random_checkpoint(c, 3));
  test::expect_error([&] { audio::AudioEncoder::load(d.str()); }, ErrorKind::kNotFound,
                     {"diffusion_pytorch_model.safetensors", "holds no encoder", "audio references"});
  // One tensor of the encoder missing is named.
  auto tensors = audio::random_checkpoint(c, 3);
  for (auto& named : audio::random_encoder_checkpoint(c, 4)) {
    if (named.first != "pre_block.norm2.weight") tensors.push_back(named);
  }
  io::write_safetensors(d / "diffusion_pytorch_model.safetensors", tensors);
  test::expect_error([&] { audio::AudioEncoder::load(d.str()); }, ErrorKind::kNotFound,
                     {"'pre_block.norm2.weight'"});
}

}  // namespace
}  // namespace h3
