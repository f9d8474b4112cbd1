// The audio decoder on seeded random weights: the reach arithmetic of the streaming rule,
// pieces decoded with decode_range equal to the whole decode, the exact sample count, the
// rows' layout, bad inputs, and the WAV writer.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "../../temp_dir.h"
#include "audio/audio_decoder.h"
#include "h3/error.h"

namespace {

namespace fs = std::filesystem;
using h3::audio::AudioDecoder;
using h3::audio::AudioVaeConfig;

// The tests' decoder: the release's architecture at small widths.
const AudioDecoder& tiny() {
  static const AudioDecoder d = AudioDecoder::random(h3::audio::small_config(64, 128, 7), 11);
  return d;
}

at::Tensor random_rows(int64_t a, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randn({2 * a, 32}, gen, at::TensorOptions().dtype(at::kFloat));
}

TEST(AudioReach, ReleaseConfigNeeds29LatentsOfContext) {
  const AudioVaeConfig c;  // the release's defaults
  EXPECT_EQ(c.hop(), 800);
  EXPECT_EQ(c.reach_samples(), 22893);  // docs/h3-model.md §9
  EXPECT_EQ(c.context_latents(), 29);
  EXPECT_EQ(c.stage_channels(0), 512);
  EXPECT_EQ(c.stage_channels(6), 8);
  EXPECT_EQ(tiny().context_latents(), 29);  // the reach depends on kernels and rates, not widths
}

TEST(AudioDecode, SampleCountIsHopTimesLatents) {
  for (int64_t a : {1, 2, 8, 37}) {
    const at::Tensor w = tiny().decode(random_rows(a, 100 + a));
    ASSERT_EQ(w.sizes(), (std::vector<int64_t>{2, 800 * a})) << "A = " << a;
    EXPECT_EQ(w.scalar_type(), at::kFloat);
    EXPECT_TRUE(w.device().is_cpu());
    EXPECT_LE(w.abs().max().item<double>(), 1.0);
  }
}

TEST(AudioDecode, RandomWeightsMakeSoundNotSilenceOrClipping) {
  const at::Tensor w = tiny().decode(random_rows(20, 3));
  const double rms = w.pow(2).mean().sqrt().item<double>();
  const double clipped = w.abs().ge(1.0).to(at::kFloat).mean().item<double>();
  std::printf("[ audio ] tiny random decoder: rms %.3g, clipped fraction %.3g\n", rms, clipped);
  EXPECT_GT(rms, 1e-3);
  EXPECT_LT(clipped, 0.5);
}

TEST(AudioDecode, LeftChannelIsTheFirstHalfOfTheRows) {
  const int64_t a = 6;
  const at::Tensor rows = random_rows(a, 5);
  const at::Tensor w = tiny().decode(rows);
  // Swapping the halves of the rows swaps the channels.
  const at::Tensor swapped = at::cat({rows.slice(0, a), rows.slice(0, 0, a)}, 0);
  const at::Tensor ws = tiny().decode(swapped);
  EXPECT_LE((ws[0] - w[1]).abs().max().item<double>(), 1e-6);
  EXPECT_LE((ws[1] - w[0]).abs().max().item<double>(), 1e-6);
  EXPECT_GT((w[0] - w[1]).abs().max().item<double>(), 1e-3);
}

// Video-chunk-sized pieces (17 frames = 28.3 latents; here uneven pieces around that size),
// each decoded with its context, concatenate to the whole decode.
TEST(AudioStreaming, PiecesWithContextEqualTheWholeDecode) {
  const int64_t a = 120;  // 72 frames: round(72 · 5/3)
  const at::Tensor rows = random_rows(a, 21);
  const at::Tensor whole = tiny().decode(rows);
  const std::vector<int64_t> bounds{0, 35, 63, 92, 118, 120};
  std::vector<at::Tensor> pieces;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    const at::Tensor p = tiny().decode_range(rows, bounds[i], bounds[i + 1]);
    ASSERT_EQ(p.size(1), 800 * (bounds[i + 1] - bounds[i]));
    pieces.push_back(p);
  }
  const at::Tensor joined = at::cat(pieces, 1);
  ASSERT_EQ(joined.sizes(), whole.sizes());
  const double err = (joined - whole).abs().max().item<double>();
  std::printf("[ audio ] streamed vs whole (A = %lld, %zu pieces): max |diff| %.3g\n",
              static_cast<long long>(a), pieces.size(), err);
  EXPECT_LE(err, 1e-5);
}

// The rule is tight enough to matter: with too little context a piece differs.
TEST(AudioStreaming, PiecesWithoutContextDiffer) {
  const int64_t a = 90;
  const at::Tensor rows = random_rows(a, 22);
  const at::Tensor whole = tiny().decode(rows);
  // Latents [30, 60) decoded alone (no context): their own rows only.
  const at::Tensor alone_rows = at::cat({rows.slice(0, 30, 60), rows.slice(0, a + 30, a + 60)}, 0);
  const at::Tensor alone = tiny().decode(alone_rows);
  const at::Tensor want = whole.slice(1, 30 * 800, 60 * 800);
  EXPECT_GT((alone - want).abs().max().item<double>(), 1e-3);
  EXPECT_LE((tiny().decode_range(rows, 30, 60) - want).abs().max().item<double>(), 1e-5);
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const h3::Error& e) {
    EXPECT_EQ(e.kind(), h3::ErrorKind::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(AudioDecode, RowsOfTheWrongShapeAreRefused) {
  for (const at::Tensor& bad :
       {at::zeros({15, 32}), at::zeros({16, 24}), at::zeros({2, 8, 32}), at::zeros({0, 32}), at::Tensor()}) {
    const std::string e = error_of([&] { tiny().decode(bad); });
    EXPECT_NE(e.find("[2·A, 32]"), std::string::npos) << e;
  }
  const std::string e = error_of([&] { tiny().decode(at::zeros({16, 32}, at::kLong)); });
  EXPECT_NE(e.find("floating-point"), std::string::npos) << e;
}

TEST(AudioDecode, RangesOutsideTheLatentsAreRefused) {
  const at::Tensor rows = random_rows(8, 1);
  for (const auto& [b, e] : {std::pair<int64_t, int64_t>{-1, 4}, {4, 9}, {5, 5}, {6, 2}}) {
    const std::string msg = error_of([&] { tiny().decode_range(rows, b, e); });
    EXPECT_NE(msg.find("8 audio latents"), std::string::npos) << msg;
  }
}

TEST(AudioDecode, RandomWeightsAreSeeded) {
  const AudioVaeConfig c = h3::audio::small_config(64, 128, 7);
  const at::Tensor rows = random_rows(3, 4);
  EXPECT_TRUE(at::equal(AudioDecoder::random(c, 11).decode(rows), tiny().decode(rows)));
  EXPECT_FALSE(at::equal(AudioDecoder::random(c, 12).decode(rows), tiny().decode(rows)));
}

// The embedded default model's audio VAE (the build's data/tiny, release native layout).
TEST(AudioTinyModel, LoadsAndDecodes) {
  const char* model = std::getenv("H3_MODEL_DIR");
  ASSERT_NE(model, nullptr) << "H3_MODEL_DIR is set by the test environment";
  const AudioDecoder d = AudioDecoder::load(fs::path(model) / "audio_vae");
  EXPECT_EQ(d.config().decoder_dim, 128);
  EXPECT_EQ(d.config().resblock_kernel_sizes, std::vector<int64_t>{3});
  EXPECT_EQ(d.samples_per_latent(), 800);
  EXPECT_EQ(d.context_latents(), d.config().context_latents());
  const at::Tensor w = d.decode(random_rows(3, 9));
  ASSERT_EQ(w.sizes(), (std::vector<int64_t>{2, 2400}));
  EXPECT_GT(w.abs().max().item<double>(), 1e-3);
}

// --- WAV ----------------------------------------------------------------------------------

uint32_t u32(const std::string& b, size_t at) {
  return static_cast<uint32_t>(static_cast<uint8_t>(b[at])) |
         static_cast<uint32_t>(static_cast<uint8_t>(b[at + 1])) << 8 |
         static_cast<uint32_t>(static_cast<uint8_t>(b[at + 2])) << 16 |
         static_cast<uint32_t>(static_cast<uint8_t>(b[at + 3])) << 24;
}
uint16_t u16(const std::string& b, size_t at) {
  return static_cast<uint16_t>(static_cast<uint8_t>(b[at]) | static_cast<uint8_t>(b[at + 1]) << 8);
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

TEST(AudioWav, FloatFileHoldsTheInterleavedSamples) {
  const h3::test::TempDir dir("audio-f32");
  const fs::path p = dir / "f32.wav";
  const at::Tensor w = at::stack({at::linspace(-1, 1, 5), at::linspace(0.5, -0.5, 5)});
  h3::audio::write_wav(p, w, 32000);
  const std::string b = read_all(p);
  ASSERT_EQ(b.size(), 12u + 26u + 12u + 8u + 40u);
  EXPECT_EQ(b.substr(0, 4), "RIFF");
  EXPECT_EQ(u32(b, 4), b.size() - 8);
  EXPECT_EQ(b.substr(8, 8), "WAVEfmt ");
  EXPECT_EQ(u32(b, 16), 18u);
  EXPECT_EQ(u16(b, 20), 3);  // IEEE float
  EXPECT_EQ(u16(b, 22), 2);
  EXPECT_EQ(u32(b, 24), 32000u);
  EXPECT_EQ(u32(b, 28), 32000u * 8);
  EXPECT_EQ(u16(b, 32), 8);
  EXPECT_EQ(u16(b, 34), 32);
  EXPECT_EQ(b.substr(38, 4), "fact");
  EXPECT_EQ(u32(b, 46), 5u);
  EXPECT_EQ(b.substr(50, 4), "data");
  EXPECT_EQ(u32(b, 54), 40u);
  std::vector<float> got(10);
  std::memcpy(got.data(), b.data() + 58, 40);
  const std::vector<float> want{-1.0f, 0.5f, -0.5f, 0.25f, 0.0f, 0.0f, 0.5f, -0.25f, 1.0f, -0.5f};
  EXPECT_EQ(got, want);
}

TEST(AudioWav, Pcm16FileIsScaledAndClamped) {
  const h3::test::TempDir dir("audio-s16");
  const fs::path p = dir / "s16.wav";
  const at::Tensor w = at::tensor({0.5f, -2.0f, 1.0f, 0.0f}).view({2, 2});
  h3::audio::write_wav(p, w, 16000, h3::audio::WavFormat::kPcm16);
  const std::string b = read_all(p);
  ASSERT_EQ(b.size(), 44u + 8u);
  EXPECT_EQ(u16(b, 20), 1);  // PCM
  EXPECT_EQ(u16(b, 34), 16);
  EXPECT_EQ(b.substr(36, 4), "data");
  EXPECT_EQ(u32(b, 40), 8u);
  // Interleaved: (0.5, 1.0), (-2.0 -> -1.0, 0.0).
  EXPECT_EQ(static_cast<int16_t>(u16(b, 44)), 16384);
  EXPECT_EQ(static_cast<int16_t>(u16(b, 46)), 32767);
  EXPECT_EQ(static_cast<int16_t>(u16(b, 48)), -32767);
  EXPECT_EQ(static_cast<int16_t>(u16(b, 50)), 0);
}

TEST(AudioWav, UnwritablePathIsNamed) {
  try {
    h3::audio::write_wav("/nonexistent-folder/x.wav", at::zeros({2, 4}), 32000);
    FAIL();
  } catch (const h3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-folder/x.wav"), std::string::npos);
  }
}

}  // namespace
