// Golden vectors of the reference audio-VAE decode (tests/data/golden/h3_audio, see the
// README there): the tiny decoder from the diffusers layout, from the release's native layout
// and from the parametrizations.weight.original0/1 spelling; the fixed anti-aliasing filters;
// and the loader's errors, each naming the file or tensor.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "../../temp_dir.h"
#include "audio/audio_decoder.h"
#include "common/device.h"
#include "h3/error.h"
#include "io/safetensors.h"

namespace {

namespace fs = std::filesystem;
using h3::audio::AudioDecoder;

std::string golden(const std::string& rel) {
  const char* root = std::getenv("H3_TEST_DATA");
  return std::string(root ? root : "tests/data") + "/golden/h3_audio/" + rel;
}

const std::string kWeights = "diffusion_pytorch_model.safetensors";

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// A fixture with the tests' temporary folder (tests/temp_dir.h), removed at the end of the test.
class TempDir : public ::testing::Test {
 protected:
  // The diffusers folder with its tensors passed through `edit` (return false to drop one).
  void write_diffusers(const std::function<bool(std::string&, at::Tensor&)>& edit,
                       const std::string& config = "") {
    if (config.empty()) {
      fs::copy_file(golden("audio_vae/config.json"), dir_ / "config.json",
                    fs::copy_options::overwrite_existing);
    } else {
      std::ofstream(dir_ / "config.json") << config;
    }
    const auto src = h3::io::SafetensorsFile::open(golden("audio_vae/" + kWeights));
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& t : src->tensors()) {
      std::string name = t.name;
      at::Tensor v = src->view(t.name);
      if (edit(name, v)) tensors.emplace_back(name, v);
    }
    h3::io::write_safetensors((dir_ / kWeights).string(), tensors);
  }

  h3::test::TempDir tmp_{"audio"};
  const fs::path dir_{tmp_.str()};
};

struct Case {
  at::Tensor rows, denorm, waveform;
};

Case load_case() {
  const auto f = h3::io::SafetensorsFile::open(golden("case_a8_f5.safetensors"));
  return Case{f->view("latents_rows").clone(), f->view("latents_denorm").clone(),
              f->view("waveform").clone()};
}

// Decodes the golden case and checks it against the reference waveform.
void expect_golden(const AudioDecoder& d, const std::string& what) {
  SCOPED_TRACE(what);
  const Case c = load_case();
  const at::Tensor wave = d.decode(c.rows);
  ASSERT_EQ(wave.sizes(), (std::vector<int64_t>{2, 6400}));
  EXPECT_EQ(wave.scalar_type(), at::kFloat);
  const double err = (wave - c.waveform[0]).abs().max().item<double>();
  std::printf("[ golden ] audio a8_f5 %s: waveform max |err| %.3g\n", what.c_str(), err);
  EXPECT_LE(err, 1e-4);
  EXPECT_LE(wave.abs().max().item<double>(), 1.0);
}

TEST(AudioGolden, ConfigOfTheTinyDecoder) {
  const AudioDecoder d = AudioDecoder::load(golden("audio_vae"));
  EXPECT_EQ(d.sample_rate(), 32000);
  EXPECT_EQ(d.samples_per_latent(), 800);
  EXPECT_EQ(d.context_latents(), 29);
  EXPECT_EQ(d.config().latent_dim, 128);
  EXPECT_EQ(d.config().decoder_dim, 256);
  EXPECT_EQ(d.config().stage_channels(6), 2);
}

TEST(AudioGolden, DenormalisedLatentsMatchTheReference) {
  const AudioDecoder d = AudioDecoder::load(golden("audio_vae"));
  const Case c = load_case();
  const at::Tensor z = c.rows.reshape({2, 8, 32}).permute({0, 2, 1});
  const at::Tensor denorm = z * d.weights().latents_std + d.weights().latents_mean;
  EXPECT_LE((denorm - c.denorm).abs().max().item<double>(), 1e-6);
}

TEST(AudioGolden, DiffusersLayoutMatchesTheReference) {
  expect_golden(AudioDecoder::load(golden("audio_vae")), "diffusers");
}

TEST_F(TempDir, NativeLayoutMatchesTheReference) {
  for (const char* f : {"config.json", "config.yaml", "metadata.json"})
    fs::copy_file(golden(std::string("native/") + f), dir_ / f);
  fs::copy_file(golden("audio_vae/" + kWeights), dir_ / "model.safetensors");
  expect_golden(AudioDecoder::load(dir_), "native");
}

TEST_F(TempDir, ParametrizationsSpellingMatchesTheReference) {
  int renamed = 0;
  write_diffusers([&](std::string& name, at::Tensor&) {
    for (const auto& [from, to] :
         {std::pair<std::string, std::string>{".weight_g", ".parametrizations.weight.original0"},
          {".weight_v", ".parametrizations.weight.original1"}}) {
      if (name.size() > from.size() && name.compare(name.size() - from.size(), from.size(), from) == 0) {
        name = name.substr(0, name.size() - from.size()) + to;
        ++renamed;
      }
    }
    return true;
  });
  EXPECT_GE(renamed, 2 * 135);  // every pair of the decode path (and the encoder's)
  expect_golden(AudioDecoder::load(dir_), "parametrizations.weight.original0/1");
}

TEST(AudioGolden, AntiAliasingFiltersAreTheFixedKaiserSinc) {
  const auto f = h3::io::SafetensorsFile::open(golden("audio_vae/" + kWeights));
  const at::Tensor ours = h3::audio::kaiser_sinc_filter(12);
  for (const char* name : {"decoder.resblocks.0.activations.0.upsample.filter",
                           "decoder.activation_post.downsample.lowpass.filter"}) {
    EXPECT_LE((ours - f->view(name)).abs().max().item<double>(), 1e-7) << name;
  }
}

TEST(AudioGolden, OnTheGpu) {
  if (h3::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA GPU usable here (a CPU-only build, no driver or no GPU)";
  const AudioDecoder d = AudioDecoder::load(golden("audio_vae")).to(c10::Device(c10::kCUDA, 0));
  EXPECT_TRUE(d.device().is_cuda());
  expect_golden(d, "cuda:0");
}

// --- errors -------------------------------------------------------------------------------

template <typename F>
std::string error_of(F&& f, h3::ErrorKind kind) {
  try {
    f();
  } catch (const h3::Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST_F(TempDir, MissingFolderAndConfigAreNamed) {
  const std::string e1 = error_of([&] { AudioDecoder::load(dir_ / "nope"); }, h3::ErrorKind::kNotFound);
  EXPECT_NE(e1.find("nope"), std::string::npos) << e1;
  const std::string e2 = error_of([&] { AudioDecoder::load(dir_); }, h3::ErrorKind::kNotFound);
  EXPECT_NE(e2.find("config.json"), std::string::npos) << e2;
}

TEST_F(TempDir, MissingWeightsFileIsNamed) {
  fs::copy_file(golden("audio_vae/config.json"), dir_ / "config.json");
  const std::string e = error_of([&] { AudioDecoder::load(dir_); }, h3::ErrorKind::kNotFound);
  EXPECT_NE(e.find(dir_.string()), std::string::npos) << e;
}

TEST_F(TempDir, NativeLayoutWithoutMetadataNamesIt) {
  for (const char* f : {"config.json", "config.yaml"})
    fs::copy_file(golden(std::string("native/") + f), dir_ / f);
  const std::string e = error_of([&] { AudioDecoder::load(dir_); }, h3::ErrorKind::kNotFound);
  EXPECT_NE(e.find("metadata.json"), std::string::npos) << e;
}

TEST_F(TempDir, NativeLayoutWithoutWeightsNamesThem) {
  for (const char* f : {"config.json", "config.yaml", "metadata.json"})
    fs::copy_file(golden(std::string("native/") + f), dir_ / f);
  const std::string e = error_of([&] { AudioDecoder::load(dir_); }, h3::ErrorKind::kNotFound);
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
}

TEST_F(TempDir, NativeYamlThatDisagreesIsAFormatError) {
  for (const char* f : {"config.json", "metadata.json"})
    fs::copy_file(golden(std::string("native/") + f), dir_ / f);
  std::string yaml = read_all(golden("native/config.yaml"));
  const std::string key = "decoder_dim: 256";
  ASSERT_NE(yaml.find(key), std::string::npos);
  yaml.replace(yaml.find(key), key.size(), "decoder_dim: 512");
  std::ofstream(dir_ / "config.yaml") << yaml;
  fs::copy_file(golden("audio_vae/" + kWeights), dir_ / "model.safetensors");
  const std::string e = error_of([&] { AudioDecoder::load(dir_); }, h3::ErrorKind::kFormat);
  EXPECT_NE(e.find("config.yaml"), std::string::npos) << e;
  EXPECT_NE(e.find("decoder_dim"), std::string::npos) << e;
}

TEST_F(TempDir, MissingTensorIsNamed) {
  write_diffusers(
      [](std::string& name, at::Tensor&) { return name != "decoder.resblocks.7.convs2.1.weight_v"; });
  const std::string e = error_of([&] { AudioDecoder::load(dir_); }, h3::ErrorKind::kNotFound);
  EXPECT_NE(e.find("decoder.resblocks.7.convs2.1"), std::string::npos) << e;
  EXPECT_NE(e.find(kWeights), std::string::npos) << e;
}

TEST_F(TempDir, MissingFilterIsNamed) {
  write_diffusers(
      [](std::string& name, at::Tensor&) { return name != "decoder.activation_post.upsample.filter"; });
  const std::string e = error_of([&] { AudioDecoder::load(dir_); }, h3::ErrorKind::kNotFound);
  EXPECT_NE(e.find("decoder.activation_post.upsample.filter"), std::string::npos) << e;
}

TEST_F(TempDir, WrongShapeIsNamed) {
  write_diffusers([](std::string& name, at::Tensor& t) {
    if (name == "decoder.ups.3.0.weight_v") t = t.slice(2, 0, 3).contiguous();
    return true;
  });
  const std::string e = error_of([&] { AudioDecoder::load(dir_); }, h3::ErrorKind::kMismatch);
  EXPECT_NE(e.find("decoder.ups.3.0.weight_v"), std::string::npos) << e;
  EXPECT_NE(e.find("[32, 16, 3]"), std::string::npos) << e;
}

// The golden config with one key changed.
std::string edited_config(const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = nlohmann::json::parse(read_all(golden("audio_vae/config.json")));
  j[key] = value;
  return j.dump(2);
}

TEST_F(TempDir, ConfigThatDisagreesWithTheWeightsIsAMismatch) {
  write_diffusers([](std::string&, at::Tensor&) { return true; }, edited_config("latent_dim", 64));
  const std::string e = error_of([&] { AudioDecoder::load(dir_); }, h3::ErrorKind::kMismatch);
  EXPECT_NE(e.find("dec_in_proj.weight"), std::string::npos) << e;
}

TEST_F(TempDir, ConfigWithBadKernelsIsAFormatError) {
  std::ofstream(dir_ / "config.json") << edited_config("decoder_kernel_sizes", {9, 9, 4});
  const std::string e = error_of([&] { AudioDecoder::load(dir_); }, h3::ErrorKind::kFormat);
  EXPECT_NE(e.find("decoder_kernel_sizes"), std::string::npos) << e;
  EXPECT_NE(e.find("config.json"), std::string::npos) << e;
}

}  // namespace
