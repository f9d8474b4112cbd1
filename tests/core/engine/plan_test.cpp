// Model folders, the tiny default model, and what Engine::open refuses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>

#include "engine_test_util.h"
#include "io/safetensors.h"
#include "text/random_encoder.h"
#include "tools/tiny_model.h"

namespace h3 {
namespace {
namespace fs = std::filesystem;
using test::expect_error;
using test::TempDir;

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void edit_json(const std::string& path, const std::function<void(nlohmann::json&)>& f) {
  nlohmann::json j = nlohmann::json::parse(slurp(path));
  f(j);
  std::ofstream(path) << j.dump(2);
}

EngineOptions opts(const std::string& dir, int ranks = 1) {
  EngineOptions o;
  o.model_dir = dir;
  o.ranks = ranks;
  o.timeout = std::chrono::seconds(30);
  return o;
}

std::vector<std::string> files_of(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out.push_back(fs::relative(e.path(), dir).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(TinyModel, IsACompleteReleaseLayoutDeterministicForASeedAndSmall) {
  TempDir a("tiny"), b("tiny"), c("tiny");
  write_tiny_model(a.str(), 5);
  write_tiny_model(b.str(), 5);
  write_tiny_model(c.str(), 6);
  const std::vector<std::string> want{"audio_scheduler/scheduler_config.json",
                                      "audio_vae/config.json",
                                      "audio_vae/config.yaml",
                                      "audio_vae/metadata.json",
                                      "audio_vae/model.safetensors",
                                      "model_index.json",
                                      "scheduler/scheduler_config.json",
                                      "text_encoder/config.json",
                                      "text_encoder/model.safetensors",
                                      "tokenizer/merges.txt",
                                      "tokenizer/tokenizer_config.json",
                                      "tokenizer/vocab.json",
                                      "transformer/config.json",
                                      "transformer/diffusion_pytorch_model.safetensors",
                                      "vae/config.json",
                                      "vae/diffusion_pytorch_model.safetensors"};
  ASSERT_EQ(files_of(a.str()), want);
  uintmax_t bytes = 0;
  for (const auto& f : want) {
    EXPECT_EQ(slurp(a / f), slurp(b / f)) << f;
    bytes += fs::file_size(a / f);
  }
  EXPECT_LT(bytes, 20u << 20);  // 4.3 MB of tokenizer files and a 9.7 MB bf16 embedding table
  EXPECT_NE(slurp(a / "transformer/diffusion_pytorch_model.safetensors"),
            slurp(c / "transformer/diffusion_pytorch_model.safetensors"));
  EXPECT_NE(slurp(a / "audio_vae/model.safetensors"), slurp(c / "audio_vae/model.safetensors"));
  // Small: the decoder's 0.23 M and the encoder's 0.27 M parameters in bf16 (1.0 MB).
  EXPECT_LT(fs::file_size(a / "audio_vae/model.safetensors"), 1200u << 10);
  const ModelInfo m = read_model(a.str());
  EXPECT_TRUE(m.prompt_encoder);
  EXPECT_EQ(m.dit.hidden_size, tiny_spec().dit.hidden_size);
  EXPECT_EQ(m.vae.num_layers, 2);
  EXPECT_DOUBLE_EQ(m.video_shift, 12.0);
  EXPECT_DOUBLE_EQ(m.audio_shift, 3.0);
  // The transformer config is in the release's schema: the same keys as the release's file.
  const char* data = std::getenv("H3_TEST_DATA");
  ASSERT_NE(data, nullptr);
  auto keys = [](const std::string& p) {
    std::set<std::string> k;
    const nlohmann::json j = nlohmann::json::parse(slurp(p));
    for (auto& [key, v] : j.items()) k.insert(key);
    k.erase("_diffusers_version");
    return k;
  };
  EXPECT_EQ(keys(a / "transformer/config.json"),
            keys(std::string(data) + "/h3-release/transformer/config.json"));
  EXPECT_EQ(keys(a / "vae/config.json"), keys(std::string(data) + "/h3-release/vae/config.json"));
}

TEST(TinyModel, TheBuildTreeCopyIsFoundWithoutTheEnvironment) {
  const char* env = std::getenv("H3_MODEL_DIR");
  const std::string saved = env ? env : "";
  ::unsetenv("H3_MODEL_DIR");
  const std::string found = default_model_dir();
  if (!saved.empty()) ::setenv("H3_MODEL_DIR", saved.c_str(), 1);
  EXPECT_TRUE(fs::is_regular_file(fs::path(found) / "model_index.json")) << found;
  ::setenv("H3_MODEL_DIR", "/some/where", 1);
  EXPECT_EQ(default_model_dir(), "/some/where");
  if (saved.empty())
    ::unsetenv("H3_MODEL_DIR");
  else
    ::setenv("H3_MODEL_DIR", saved.c_str(), 1);
}

TEST(OpenErrors, MissingFolderOrIndex) {
  TempDir d("open");
  expect_error([&] { Engine::open(opts(d / "nope")); }, ErrorKind::kNotFound, {d / "nope", "model folder"});
  write_tiny_model(d.str(), 1);
  fs::remove(d / "model_index.json");
  expect_error([&] { Engine::open(opts(d.str())); }, ErrorKind::kNotFound, {"model_index.json"});
  write_tiny_model(d.str(), 1, "model_index");
  fs::remove_all(d / "transformer");
  expect_error([&] { Engine::open(opts(d.str())); }, ErrorKind::kNotFound, {"transformer", "config.json"});
}

TEST(OpenErrors, ConfigsThatDisagreeWithTheWeightsNameTheTensor) {
  TempDir d("open");
  write_tiny_model(d.str(), 1);
  edit_json(d / "transformer/config.json", [](nlohmann::json& j) { j["ffn_dim"] = 96; });
  try {
    Engine::open(opts(d.str(), 2));
    ADD_FAILURE() << "opened";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("ff.net")) << e.what();
  }
  write_tiny_model(d.str(), 1, "transformer");
  edit_json(d / "vae/config.json", [](nlohmann::json& j) { j["decoder_num_layers"] = 3; });
  try {
    Engine::open(opts(d.str()));
    ADD_FAILURE() << "opened";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("decoder.transformer_blocks.2")) << e.what();
  }
  write_tiny_model(d.str(), 1, "vae");
  edit_json(d / "text_encoder/config.json", [](nlohmann::json& j) { j["text_config"]["hidden_size"] = 16; });
  expect_error(
      [&] { Engine::open(opts(d.str())); }, ErrorKind::kMismatch,
      {"model.safetensors", "model.language_model.embed_tokens.weight", "[151936, 32]", "[151936, 16]"});
  // A consistent encoder whose rows are not the DiT's text width.
  text::EncoderConfig narrow = tiny_spec().encoder;
  narrow.hidden_size = 16;
  text::write_random_encoder(d / "text_encoder", narrow, 1);
  expect_error([&] { Engine::open(opts(d.str())); }, ErrorKind::kMismatch, {"16-wide rows", "text_dim 32"});
  write_tiny_model(d.str(), 1, "text_encoder");
  edit_json(d / "transformer/config.json", [](nlohmann::json& j) { j["in_channels"] = 16; });
  expect_error([&] { Engine::open(opts(d.str())); }, ErrorKind::kMismatch, {"latent channels"});
}

TEST(OpenErrors, RanksTpAndDevice) {
  const std::string dir = default_model_dir();
  auto o = opts(dir);
  o.ranks = 0;
  expect_error([&] { Engine::open(o); }, ErrorKind::kInvalidArgument, {"ranks = 0"});
  o.ranks = 2;
  o.tp = 1;
  expect_error([&] { Engine::open(o); }, ErrorKind::kInvalidArgument,
               {"tp-size = 1 x sp-size = 1 with 2 ranks", "give tp-size = 0 (ranks / sp) or 2"});
  o.tp = 0;
  o.sp = 3;
  expect_error([&] { Engine::open(o); }, ErrorKind::kInvalidArgument,
               {"sp-size = 3 with 2 ranks", "must divide the ranks"});
  o.sp = 1;
  o.device = "tpu";
  expect_error([&] { Engine::open(o); }, ErrorKind::kInvalidArgument, {"device"});
  o.device = "cpu";
  o.ranks = 3;  // 2 heads cannot split over 3 ranks
  expect_error([&] { Engine::open(o); }, ErrorKind::kInvalidArgument, {"size 3", "attention heads"});
  o.ranks = 4;  // tp 2 x sp 2 splits 2 heads into half a head per rank
  o.sp = 2;
  expect_error([&] { Engine::open(o); }, ErrorKind::kInvalidArgument,
               {"tp 2 x sp 2", "sp must divide the 1 heads each TP rank holds"});
}

// Older tiny folders held a byte table as their text encoder (H3ByteEncoder); no model the
// project ships or makes does now, and such a folder is refused saying what to use instead.
TEST(OpenErrors, AByteEncoderFolderIsRefusedSayingWhatToUseInstead) {
  TempDir d("open");
  write_tiny_model(d.str(), 1);
  const std::string config = d / "text_encoder/config.json";
  std::ofstream(config) << R"({"_class_name": "H3ByteEncoder", "text_dim": 32})";
  const std::string what =
      config +
      " declares H3ByteEncoder, the byte-table text encoder of older tiny models, which is no "
      "longer supported: give the folder a Qwen3-VL text encoder";
  for (const auto& open : std::vector<std::function<void()>>{[&] { read_model(d.str()); },
                                                             [&] { Engine::open(opts(d.str())); }}) {
    expect_error(
        open, ErrorKind::kFormat,
        {what, "h3 encode-prompt --model DIR --prompt TEXT --out FILE", "--embeds FILE", "embeds property"});
  }
}

TEST(OpenErrors, AModelWithoutABuiltInEncoderAsksForEmbeddings) {
  // The golden model folder stands in for the full-size one: no built-in text encoder.
  TempDir d("open");
  const std::string data = std::getenv("H3_TEST_DATA");
  fs::copy(data + "/golden/h3_dit/transformer_tiny", d / "transformer", fs::copy_options::recursive);
  fs::copy(data + "/golden/h3_vae/diffusers", d / "vae", fs::copy_options::recursive);
  fs::copy_file(data + "/h3-release/model_index.json", d / "model_index.json");
  auto e = Engine::open(opts(d.str()));
  EXPECT_FALSE(e->model().prompt_encoder);
  GenerationRequest r;
  r.prompt = "a cat";
  r.width = 96;
  r.height = 64;
  r.num_frames = 22;
  r.steps = 2;
  expect_error([&] { e->plan(r); }, ErrorKind::kInvalidArgument, {"embeds", "[L, 64]", "--embeds"});
}

}  // namespace
}  // namespace h3
