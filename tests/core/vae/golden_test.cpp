// Golden vectors of the reference implementation (tests/data/golden/h3_vae, see its
// README): every case from the diffusers-layout and the native-layout weights, at
// 1 and 2 ranks, with the reference's chunk sizes. Also the loader's errors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "../../temp_dir.h"
#include "common/device.h"
#include "dist/group.h"
#include "dist/world.h"
#include "h3/error.h"
#include "io/safetensors.h"
#include "vae/video_decoder.h"

namespace {

namespace fs = std::filesystem;
using h3::vae::VideoDecoder;

std::string golden(const std::string& rel) {
  const char* root = std::getenv("H3_TEST_DATA");
  return std::string(root ? root : "tests/data") + "/golden/h3_vae/" + rel;
}

struct Sink : h3::ChunkSink {
  std::vector<at::Tensor> u8, f32;
  void on_chunk(const h3::Chunk& c) override {
    u8.push_back(c.frames);
    f32.push_back(c.frames_f32);
  }
};

struct Result {
  at::Tensor u8, f32;
  std::vector<int64_t> chunks;
};

Result decode(const VideoDecoder& d, const at::Tensor& lat, int ranks) {
  Sink sink;
  h3::vae::DecodeOptions o;
  o.float_frames = true;
  const auto results = h3::dist::run_threads(
      ranks, [&](h3::dist::Group& g) { d.decode_chunks(lat, g.rank() == 0 ? &sink : nullptr, g, o); });
  for (const auto& r : results) EXPECT_TRUE(r.ok) << "rank " << r.rank << ": " << r.error;
  Result res;
  for (const auto& t : sink.u8) res.chunks.push_back(t.size(0));
  if (!sink.u8.empty()) {
    res.u8 = at::cat(sink.u8, 0);
    res.f32 = at::cat(sink.f32, 0);
  }
  return res;
}

class Golden : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    diffusers_ = new VideoDecoder(VideoDecoder::load(golden("diffusers")));
    native_ = new VideoDecoder(VideoDecoder::load(golden("native")));
  }
  static void TearDownTestSuite() {
    delete diffusers_;
    delete native_;
  }
  static VideoDecoder* diffusers_;
  static VideoDecoder* native_;
};
VideoDecoder* Golden::diffusers_ = nullptr;
VideoDecoder* Golden::native_ = nullptr;

TEST_P(Golden, MatchesTheReferenceFromBothLayoutsAtOneAndTwoRanks) {
  const auto file = h3::io::SafetensorsFile::open(golden("case_" + GetParam() + ".safetensors"));
  const at::Tensor lat = file->view("latents");
  const at::Tensor want_u8 = file->view("frames_u8");
  const at::Tensor want_chunks = file->view("chunk_frames").to(at::kLong);
  const bool has_f32 = file->find("frames_f32") != nullptr;
  std::vector<int64_t> chunks(want_chunks.data_ptr<int64_t>(),
                              want_chunks.data_ptr<int64_t>() + want_chunks.numel());

  at::Tensor first_u8, first_f32;
  for (const VideoDecoder* d : {diffusers_, native_}) {
    for (int ranks : {1, 2}) {
      SCOPED_TRACE(std::string(d == diffusers_ ? "diffusers" : "native") + " weights, " +
                   std::to_string(ranks) + " rank(s)");
      const Result r = decode(*d, lat, ranks);
      ASSERT_TRUE(r.u8.defined());
      EXPECT_EQ(r.chunks, chunks);
      ASSERT_EQ(r.u8.sizes(), want_u8.sizes());
      const at::Tensor diff = (r.u8.to(at::kInt) - want_u8.to(at::kInt)).abs();
      const int64_t off = diff.gt(0).sum().item<int64_t>();
      EXPECT_LE(diff.max().item<int>(), 1);
      EXPECT_LE(static_cast<double>(off), 0.001 * static_cast<double>(diff.numel()));
      if (has_f32) {
        const double err = (r.f32 - file->view("frames_f32")).abs().max().item<double>();
        EXPECT_LE(err, 1e-4);
        std::printf("[ golden ] %s %s %d rank(s): frames max |err| %.3g, uint8 off by 1: %lld of %lld\n",
                    GetParam().c_str(), d == diffusers_ ? "diffusers" : "native", ranks, err,
                    static_cast<long long>(off), static_cast<long long>(diff.numel()));
      } else {
        std::printf("[ golden ] %s %s %d rank(s): uint8 off by 1: %lld of %lld\n", GetParam().c_str(),
                    d == diffusers_ ? "diffusers" : "native", ranks, static_cast<long long>(off),
                    static_cast<long long>(diff.numel()));
      }
      // Both layouts and every rank count give the same frames, bit for bit.
      if (!first_u8.defined()) {
        first_u8 = r.u8;
        first_f32 = r.f32;
      } else {
        EXPECT_TRUE(at::equal(r.u8, first_u8));
        EXPECT_TRUE(at::equal(r.f32, first_f32));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Golden, ::testing::Values("t12_h8w12", "t9_h8w20"));

TEST(GoldenErrors, TooShortLatentsAreRefused) {
  const VideoDecoder d = VideoDecoder::load(golden("diffusers"));
  for (int64_t t : {1, 2}) {
    try {
      d.decode(at::zeros({1, 24, t, 8, 8}));
      FAIL() << "T = " << t;
    } catch (const h3::Error& e) {
      EXPECT_EQ(e.kind(), h3::ErrorKind::kInvalidArgument);
    }
  }
}

// A copy of the diffusers folder with a tensor left out, or a config that disagrees.
class BrokenCheckpoint : public ::testing::Test {
 protected:
  void write(const std::string& config, const std::string& drop) {
    fs::copy_file(golden("diffusers/config.json"), dir_ / "config.json",
                  fs::copy_options::overwrite_existing);
    if (!config.empty()) std::ofstream(dir_ / "config.json") << config;
    const auto src = h3::io::SafetensorsFile::open(golden("diffusers/diffusion_pytorch_model.safetensors"));
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& t : src->tensors()) {
      if (t.name != drop) tensors.emplace_back(t.name, src->view(t.name));
    }
    h3::io::write_safetensors((dir_ / "diffusion_pytorch_model.safetensors").string(), tensors);
  }
  const h3::test::TempDir tmp_{"vae-broken"};
  const fs::path dir_ = tmp_.str();
};

TEST_F(BrokenCheckpoint, MissingTensorIsNamed) {
  write("", "decoder.transformer_blocks.1.attn.to_v.bias");
  try {
    VideoDecoder::load(dir_.string());
    FAIL();
  } catch (const h3::Error& e) {
    EXPECT_EQ(e.kind(), h3::ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find("decoder.transformer_blocks.1.attn.to_v.bias"), std::string::npos)
        << e.what();
  }
}

TEST_F(BrokenCheckpoint, ConfigThatDisagreesWithTheWeightsIsAMismatch) {
  std::ifstream in(golden("diffusers/config.json"));
  std::string cfg((std::istreambuf_iterator<char>(in)), {});
  const std::string key = "\"decoder_attention_head_dim\": 32";
  ASSERT_NE(cfg.find(key), std::string::npos);
  cfg.replace(cfg.find(key), key.size(), "\"decoder_attention_head_dim\": 16");
  write(cfg, "");
  try {
    VideoDecoder::load(dir_.string());
    FAIL();
  } catch (const h3::Error& e) {
    EXPECT_EQ(e.kind(), h3::ErrorKind::kMismatch) << e.what();
  }
}

}  // namespace

// The decode on a GPU (weights moved with VideoDecoder::to; the frames reach the sink on the
// CPU): the same golden tolerances, one rank on cuda:0 and, where two GPUs are present, two
// ranks over NCCL. Skipped, with the reason, where no GPU is usable.
TEST(GoldenCuda, MatchesTheReferenceOnTheGpu) {
  const int gpus = h3::cuda_device_count();
  if (gpus == 0) GTEST_SKIP() << "no CUDA GPU usable here (a CPU-only build, no driver or no GPU)";
  const VideoDecoder cpu = VideoDecoder::load(golden("diffusers"));
  for (const char* name : {"t12_h8w12", "t9_h8w20"}) {
    const auto file = h3::io::SafetensorsFile::open(golden(std::string("case_") + name + ".safetensors"));
    const at::Tensor lat = file->view("latents");
    const at::Tensor want_u8 = file->view("frames_u8");
    for (int ranks = 1; ranks <= std::min(gpus, 2); ++ranks) {
      SCOPED_TRACE(std::string(name) + ", " + std::to_string(ranks) + " GPU rank(s)");
      Sink sink;
      h3::vae::DecodeOptions o;
      o.float_frames = true;
      h3::dist::WorldOptions wo;
      if (ranks > 1) wo.backend = h3::dist::Backend::kNccl;
      const auto results = h3::dist::run_threads(
          ranks,
          [&](h3::dist::Group& g) {
            const VideoDecoder d = cpu.to(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(g.rank())));
            EXPECT_TRUE(d.device().is_cuda());
            d.decode_chunks(lat, g.rank() == 0 ? &sink : nullptr, g, o);
          },
          wo);
      for (const auto& r : results) EXPECT_TRUE(r.ok) << "rank " << r.rank << ": " << r.error;
      ASSERT_FALSE(sink.u8.empty());
      const at::Tensor u8 = at::cat(sink.u8, 0);
      EXPECT_FALSE(u8.is_cuda());
      ASSERT_EQ(u8.sizes(), want_u8.sizes());
      const at::Tensor diff = (u8.to(at::kInt) - want_u8.to(at::kInt)).abs();
      EXPECT_LE(diff.max().item<int>(), 1);
      EXPECT_LE(static_cast<double>(diff.gt(0).sum().item<int64_t>()),
                0.001 * static_cast<double>(diff.numel()));
      if (file->find("frames_f32") != nullptr) {
        EXPECT_LE((at::cat(sink.f32, 0) - file->view("frames_f32")).abs().max().item<double>(), 1e-4);
      }
    }
  }
}
