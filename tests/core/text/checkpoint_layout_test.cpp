// The whole Qwen3-VL checkpoint derived from config.json, held against real indexes: the tiny
// golden encoder's (saved by transformers' Qwen3-VL, vision tower included) name for name, and
// the release's text_encoder/ index by its totals (docs/h3-model.md §10.1: 1058 tensors,
// 66,714,780,128 bytes in bf16; ../shared holds only the release's config, not its index).
#include "text/checkpoint_layout.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "golden_encoder.h"
#include "text_test_util.h"

namespace h3 {
namespace {

TEST(CheckpointLayout, NamesTheTinyGoldenIndexTensorForTensor) {
  const std::string dir = test::text_golden_dir() + "/text_encoder_tiny_compact";
  std::ifstream in(dir + "/model.safetensors.index.json");
  const auto index = nlohmann::json::parse(in);
  std::set<std::string> stored;
  for (const auto& [name, shard] : index["weight_map"].items()) stored.insert(name);
  std::set<std::string> derived;
  for (const auto& p : text::checkpoint_parameters(dir + "/config.json")) derived.insert(p.name);
  // The golden encoder was saved without lm_head (transformers' base model); the release has one.
  ASSERT_EQ(derived.erase("lm_head.weight"), 1u);
  EXPECT_EQ(derived, stored);
}

TEST(CheckpointLayout, MatchesTheReleaseIndexTotals) {
  const auto all = text::checkpoint_parameters(test::data_dir() + "/h3-release/text_encoder/config.json");
  int64_t params = 0, visual = 0;
  for (const auto& p : all) {
    params += p.numel();
    if (p.name.rfind("model.visual.", 0) == 0) ++visual;
  }
  EXPECT_EQ(all.size(), 1058u);
  EXPECT_EQ(visual, 351);  // 27 blocks x 12, the merger and 3 deepstack mergers x 6, 3 embedding tensors
  EXPECT_EQ(2 * params, 66714780128);
}

TEST(CheckpointLayout, AVisionConfigWithoutItsNumbersIsRefusedNamingTheFile) {
  test::TempDir d("layout");
  std::ifstream in(test::data_dir() + "/h3-release/text_encoder/config.json");
  auto config = nlohmann::json::parse(in);
  config["vision_config"].erase("intermediate_size");
  std::ofstream(d / "config.json") << config.dump();
  test::expect_error([&] { text::checkpoint_parameters(d / "config.json"); }, ErrorKind::kFormat,
                     {d / "config.json", "vision_config.intermediate_size"});
}

}  // namespace
}  // namespace h3
