// The Qwen3-VL vision tower against transformers' vectors (tests/data/vision, made by
// bench/reference/make_vision_vectors.py): the image processor's resize and patches exactly, the
// merged visual embeddings and deepstack features within 1e-4, at 1 and 2 ranks; the release's
// vision_config and checkpoint names; bad images.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "dist/group.h"
#include "dist/world.h"
#include "golden_encoder.h"
#include "io/safetensors.h"
#include "text/checkpoint_layout.h"
#include "text/vision_prompt.h"
#include "text/vision_tower.h"
#include "text_test_util.h"

namespace h3::text {
namespace {

std::string vision_dir() {
  return test::data_dir() + "/vision";
}
std::string tower_dir() {
  return vision_dir() + "/text_encoder";
}

nlohmann::json vision_cases() {
  std::ifstream in(vision_dir() + "/cases.json");
  return nlohmann::json::parse(in);
}

std::map<std::string, at::Tensor> vision_case(const std::string& name) {
  return test::read_tensors(vision_dir() + "/case_" + name + ".safetensors");
}

ImageProcessorConfig processor_of(const nlohmann::json& c) {
  ImageProcessorConfig p;
  p.min_pixels = c["min_pixels"].get<int64_t>();
  p.max_pixels = c["max_pixels"].get<int64_t>();
  return p;
}

TEST(VisionConfig, ReadsTheReleaseConfig) {
  const auto c = VisionConfig::load(test::data_dir() + "/h3-release/text_encoder/config.json");
  EXPECT_EQ(c.depth, 27);
  EXPECT_EQ(c.hidden_size, 1152);
  EXPECT_EQ(c.num_heads, 16);
  EXPECT_EQ(c.head_dim(), 72);
  EXPECT_EQ(c.intermediate_size, 4304);
  EXPECT_EQ(c.patch_size, 16);
  EXPECT_EQ(c.temporal_patch_size, 2);
  EXPECT_EQ(c.spatial_merge_size, 2);
  EXPECT_EQ(c.out_hidden_size, 5120);
  EXPECT_EQ(c.position_side(), 48);
  EXPECT_EQ(c.deepstack_visual_indexes, (std::vector<int64_t>{8, 16, 24}));
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.image_token_id, 151655);
  EXPECT_EQ(c.vision_start_token_id, 151652);
  EXPECT_EQ(c.vision_end_token_id, 151653);
  EXPECT_NO_THROW(c.check_tp(8, "release"));
  test::expect_error([&] { c.check_tp(3, "release"); }, ErrorKind::kInvalidArgument, {"3", "vision tower"});
}

TEST(VisionConfig, ParametersAreTheCheckpointLayoutsVisionTensors) {
  for (const std::string& path :
       {test::data_dir() + "/h3-release/text_encoder/config.json", tower_dir() + "/config.json"}) {
    std::map<std::string, std::vector<int64_t>> layout, declared;
    for (const auto& p : checkpoint_parameters(path))
      if (p.name.rfind("model.visual.", 0) == 0) layout[p.name] = p.shape;
    for (const auto& p : vision_parameters(VisionConfig::load(path))) declared[p.name] = p.shape;
    EXPECT_EQ(declared, layout) << path;
  }
  // The release's tower: 27 blocks of 12 tensors, 3 + 4 mergers of 6.
  EXPECT_EQ(vision_parameters(VisionConfig::load(test::data_dir() + "/h3-release/text_encoder")).size(),
            size_t(3 + 27 * 12 + 4 * 6));
}

TEST(VisionConfig, SmartResizeAsTheProcessor) {
  using A = std::array<int64_t, 2>;
  EXPECT_EQ(smart_resize(64, 96, 32, 65536, 16777216), (A{224, 320}));
  EXPECT_EQ(smart_resize(50, 70, 32, 65536, 16777216), (A{224, 320}));
  EXPECT_EQ(smart_resize(64, 96, 32, 1024, 16384), (A{64, 96}));
  EXPECT_EQ(smart_resize(200, 130, 32, 1024, 16384), (A{128, 96}));
  EXPECT_EQ(smart_resize(48, 80, 32, 1024, 1 << 24), (A{64, 64}));          // round(1.5) = 2, round(2.5) = 2
  EXPECT_EQ(smart_resize(720, 1280, 32, 65536, 16777216), (A{704, 1280}));  // round(22.5) = 22
  test::expect_error([] { smart_resize(16, 4000, 32, 1024, 1 << 24); }, ErrorKind::kInvalidArgument,
                     {"aspect ratio", "200"});
}

TEST(VisionPreprocess, ResizeAndPatchesEqualTheProcessors) {
  const auto cases = vision_cases();
  const auto config = VisionConfig::load(tower_dir());
  for (const auto& c : cases["cases"]) {
    const std::string name = c["name"];
    auto t = vision_case(name);
    const auto tower = VisionTower::load(tower_dir(), nullptr, {}, processor_of(c));
    const auto in = tower.preprocess(t.at("image"));
    const auto grid = t.at("image_grid_thw").view({3});
    EXPECT_EQ(in.grid_thw[0], grid[0].item<int64_t>()) << name;
    EXPECT_EQ(in.grid_thw[1], grid[1].item<int64_t>()) << name;
    EXPECT_EQ(in.grid_thw[2], grid[2].item<int64_t>()) << name;
    ASSERT_TRUE(in.resized.sizes().equals(t.at("resized").sizes())) << name;
    const int64_t off = (in.resized.to(at::kInt) - t.at("resized").to(at::kInt)).abs().max().item<int64_t>();
    std::printf("%s: resized %lld x %lld, max |d resized| = %lld", name.c_str(),
                (long long)in.resized.size(1), (long long)in.resized.size(2), (long long)off);
    EXPECT_EQ(off, 0) << name;
    if (t.count("pixel_values")) {
      const double d = test::max_abs_diff(in.patches, t.at("pixel_values"));
      std::printf(", max |d patches| = %.3g", d);
      EXPECT_LE(d, 1e-6) << name;
    }
    std::printf("\n");
    EXPECT_EQ(in.patches.size(0), in.grid_thw[1] * in.grid_thw[2]);
    EXPECT_EQ(in.patches.size(1), config.patch_width());
    EXPECT_EQ(in.tokens(config.spatial_merge_size), c["merged_tokens"].get<int64_t>()) << name;
  }
}

void expect_features(const VisionFeatures& f, const std::map<std::string, at::Tensor>& t,
                     const std::string& name, double tol) {
  ASSERT_TRUE(f.embeds.sizes().equals(t.at("image_embeds").sizes())) << name;
  const double d = test::max_abs_diff(f.embeds, t.at("image_embeds"));
  std::printf("%s: tokens %lld, max |d embeds| = %.3g", name.c_str(), (long long)f.embeds.size(0), d);
  EXPECT_LE(d, tol) << name;
  ASSERT_EQ(f.deepstack.size(), 2u) << name;
  for (size_t j = 0; j < f.deepstack.size(); ++j) {
    const double dj = test::max_abs_diff(f.deepstack[j], t.at("deepstack_" + std::to_string(j)));
    std::printf(", deepstack %zu %.3g", j, dj);
    EXPECT_LE(dj, tol) << name << " deepstack " << j;
  }
  std::printf("\n");
}

TEST(VisionTower, FeaturesEqualTransformersAtTp1) {
  const auto cases = vision_cases();  // held: a range over a temporary's member would dangle
  for (const auto& c : cases["cases"]) {
    const std::string name = c["name"];
    auto t = vision_case(name);
    const auto tower = VisionTower::load(tower_dir(), nullptr, {}, processor_of(c));
    const auto in = tower.preprocess(t.at("image"));
    expect_features(tower.forward(in), t, name, 1e-4);
    if (t.count("pixel_values")) {  // the reference's own patches give the same
      expect_features(tower.forward(t.at("pixel_values"), in.grid_thw), t, name + " (reference patches)",
                      1e-4);
    }
  }
}

TEST(VisionTower, TwoFramesAttendWithinEachFrame) {
  // A video of two identical frames (t = 2) gives the image's features twice.
  const auto c = vision_cases()["cases"][2];
  auto t = vision_case(c["name"]);
  const auto tower = VisionTower::load(tower_dir(), nullptr, {}, processor_of(c));
  const auto in = tower.preprocess(t.at("image"));
  const auto one = tower.forward(in);
  const auto two = tower.forward(at::cat({in.patches, in.patches}), {2, in.grid_thw[1], in.grid_thw[2]});
  EXPECT_LE(test::max_abs_diff(two.embeds, at::cat({one.embeds, one.embeds})), 1e-5);
}

TEST(VisionTowerTp, Tp2EqualsTp1OnEveryRank) {
  const auto cases = vision_cases();  // held: a range over a temporary's member would dangle
  for (const auto& c : cases["cases"]) {
    const std::string name = c["name"];
    auto t = vision_case(name);
    std::vector<VisionFeatures> out(2);
    std::vector<int64_t> own(2);
    const auto results = dist::run_threads(2, [&](dist::Group& g) {
      at::set_num_threads(1);
      const auto tower = VisionTower::load(tower_dir(), &g, {}, processor_of(c));
      own[g.rank()] = static_cast<int64_t>(tower.named().size());
      out[g.rank()] = tower.forward(tower.preprocess(t.at("image")));
    });
    for (const auto& r : results) ASSERT_TRUE(r.ok) << "rank " << r.rank << ": " << r.error;
    for (int r = 0; r < 2; ++r) expect_features(out[r], t, name + " TP2 rank " + std::to_string(r), 1e-4);
  }
  // Shards: rank 1's qkv holds the second half of each of q, k and v.
  const auto results = dist::run_threads(2, [&](dist::Group& g) {
    const auto tower = VisionTower::load(tower_dir(), &g);
    const auto whole = test::read_tensors(tower_dir() + "/model.safetensors");
    for (const auto& [n, v] : tower.named()) {
      if (n != "model.visual.blocks.1.attn.qkv.weight") continue;
      const auto& full = whole.at(n);  // [96, 32]: q, k, v of 4 heads of 8
      const int64_t r = g.rank();
      auto expect = at::cat(
          {full.narrow(0, r * 16, 16), full.narrow(0, 32 + r * 16, 16), full.narrow(0, 64 + r * 16, 16)});
      if (!at::equal(v, expect)) throw Error(ErrorKind::kInternal, "qkv shard of rank " + std::to_string(r));
      if (v.storage().nbytes() != size_t(v.numel() * 4)) throw Error(ErrorKind::kInternal, "shard storage");
    }
  });
  for (const auto& r : results) EXPECT_TRUE(r.ok) << "rank " << r.rank << ": " << r.error;
}

TEST(VisionPreprocess, BadImagesSayWhatToDo) {
  const auto tower = VisionTower::load(tower_dir());
  auto u8 = at::TensorOptions().dtype(at::kByte);
  test::expect_error(
      [&] {
        tower.preprocess(at::zeros({1, 1, 3}, u8));
      },
      ErrorKind::kInvalidArgument, {"image [1, 1, 3]", "smaller than 16 x 16", "larger image"});
  // Not allocated: a broadcast view is enough to be refused before any pixel is read.
  test::expect_error(
      [&] {
        tower.preprocess(at::zeros({1, 1, 3}, u8).expand({20000, 20000, 3}));
      },
      ErrorKind::kInvalidArgument, {"image [20000, 20000, 3]", "400000000 pixels", "downscale"});
  test::expect_error(
      [&] {
        tower.preprocess(at::zeros({64, 64, 4}, u8));
      },
      ErrorKind::kInvalidArgument, {"image [64, 64, 4]", "[height, width, 3]", "RGB"});
  test::expect_error(
      [&] {
        tower.preprocess(at::zeros({3, 64, 64}, u8));
      },
      ErrorKind::kInvalidArgument, {"image [3, 64, 64]", "channels last"});
  test::expect_error(
      [&] {
        tower.preprocess(at::zeros({64, 64, 3}));
      },
      ErrorKind::kInvalidArgument, {"image [64, 64, 3]", "uint8", "8 bits"});
  test::expect_error(
      [&] {
        tower.preprocess(at::zeros({16, 4000, 3}, u8));
      },
      ErrorKind::kInvalidArgument, {"image [16, 4000, 3]", "aspect ratio"});
  test::expect_error(
      [&] {
        tower.forward(at::zeros({5, 1536}), {1, 2, 2});
      },
      ErrorKind::kInvalidArgument, {"patches must be [4, 1536]", "[5, 1536]"});
  test::expect_error(
      [&] {
        tower.forward(at::zeros({3, 1536}), {1, 1, 3});
      },
      ErrorKind::kInvalidArgument, {"grid_thw [1, 1, 3]", "multiples of 2"});
}

TEST(VisionTower, LoadErrorsNameTheFileAndTensor) {
  test::expect_error([] { VisionTower::load(test::text_golden_dir() + "/nowhere"); }, ErrorKind::kNotFound,
                     {"nowhere/config.json"});
  test::TempDir dir("vision-missing");
  std::filesystem::copy_file(tower_dir() + "/config.json", dir / "config.json");
  auto t = test::read_tensors(tower_dir() + "/model.safetensors");
  t.erase("model.visual.blocks.2.mlp.linear_fc2.weight");
  io::write_safetensors(dir / "model.safetensors", {t.begin(), t.end()});
  test::expect_error([&] { VisionTower::load(dir.str()); }, ErrorKind::kNotFound,
                     {"model.visual.blocks.2.mlp.linear_fc2.weight", "missing"});
  // 3 ranks cannot split 4 heads: every rank refuses.
  const auto results = dist::run_threads(3, [&](dist::Group& g) { VisionTower::load(tower_dir(), &g); });
  for (const auto& r : results) {
    EXPECT_FALSE(r.ok) << "rank " << r.rank;
    EXPECT_THAT(r.error, ::testing::HasSubstr("3 tensor-parallel ranks cannot split the vision tower"));
  }
}

// ---- the FL2VA presentation in the language model ----

std::vector<int64_t> ids_of(const nlohmann::json& a) {
  return a.get<std::vector<int64_t>>();
}

TEST(VisionPrompt, IdsPositionsAndTagsAsTheReference) {
  const auto c = vision_cases()["cases"][2];
  ASSERT_TRUE(c.contains("present"));
  auto t = vision_case(c["name"]);
  const auto config = VisionConfig::load(tower_dir());
  const std::array<int64_t, 3> grid{1, 4, 6};
  const auto p =
      present_image_ids(ids_of(c["present"]["prefix_ids"]), ids_of(c["present"]["prompt_ids"]), config, grid);
  EXPECT_TRUE(at::equal(at::tensor(p.ids, at::kLong), t.at("input_ids")));
  EXPECT_TRUE(at::equal(p.positions, t.at("position_ids"))) << p.positions << t.at("position_ids");
  // 5 label tokens (text), <|vision_start|> + 6 pads + <|vision_end|> (vision), 6 prompt tokens (text).
  std::vector<int64_t> tags(5, 1);
  tags.insert(tags.end(), 8, 0);
  tags.insert(tags.end(), 6, 1);
  EXPECT_TRUE(at::equal(p.tags, at::tensor(tags, at::kLong)));
  EXPECT_EQ(p.image_mask.sum().item<int64_t>(), 6);
  // Positions: text 0..5 (label + start), the 2 x 3 merged grid at 6 + (row, column), then 6 + 3 on.
  EXPECT_EQ(p.positions[1][6].item<int64_t>(), 6);
  EXPECT_EQ(p.positions[2][11].item<int64_t>(), 8);
  EXPECT_EQ(p.positions[0][12].item<int64_t>(), 9);
  test::expect_error([&] { multimodal_positions(p.ids, config.image_token_id, {}, 2); },
                     ErrorKind::kInvalidArgument, {"more runs of image tokens than images"});
  test::expect_error(
      [&] {
        multimodal_positions(p.ids, config.image_token_id, {{1, 4, 8}}, 2);
      },
      ErrorKind::kInvalidArgument, {"a run of 6 image tokens for an image of 8"});
}

void expect_presented_hidden(int ranks) {
  const auto c = vision_cases()["cases"][2];
  auto t = vision_case(c["name"]);
  const auto& manual = t.at("hidden_manual");  // [4, L, 64]: embeddings, then after each layer
  std::vector<std::vector<at::Tensor>> all(static_cast<size_t>(ranks));
  std::vector<at::Tensor> conds(static_cast<size_t>(ranks));
  const auto results = dist::run_threads(ranks, [&](dist::Group& g) {
    at::set_num_threads(1);
    dist::Group* group = ranks > 1 ? &g : nullptr;
    const auto tower = VisionTower::load(tower_dir(), group, {}, processor_of(c));
    const auto enc = TextEncoder::load(tower_dir(), 2, group);
    const auto in = tower.preprocess(t.at("image"));
    const auto f = tower.forward(in);
    const auto p = present_image_ids(ids_of(c["present"]["prefix_ids"]), ids_of(c["present"]["prompt_ids"]),
                                     tower.config(), in.grid_thw);
    auto& mine = all[static_cast<size_t>(g.rank())];
    enc.forward(at::tensor(p.ids, at::kLong), p.positions, VisualRows{p.image_mask, f.embeds, f.deepstack},
                &mine);
    // The conditioning is transformers' hidden_states[2]: the last layer's output before its
    // deepstack addition, which the residual stream (`mine`) has.
    const auto cond = encode_with_image(enc, p, f);
    conds[static_cast<size_t>(g.rank())] = cond.embeds;
    if (!at::equal(cond.tags, p.tags)) throw Error(ErrorKind::kInternal, "encode_with_image's tags differ");
  });
  for (const auto& r : results) ASSERT_TRUE(r.ok) << "rank " << r.rank << ": " << r.error;
  for (int r = 0; r < ranks; ++r) {
    ASSERT_EQ(all[r].size(), 3u);
    for (int64_t i = 0; i < 3; ++i) {
      const double d = test::max_abs_diff(all[r][i], manual[i]);
      std::printf("TP%d rank %d: max |d hidden_states[%lld]| = %.3g\n", ranks, r, (long long)i, d);
      EXPECT_LE(d, 1e-4) << "rank " << r << " hidden_states[" << i << "]";
    }
    const double dc = test::max_abs_diff(conds[r], t.at("hidden_states")[2]);
    std::printf("TP%d rank %d: max |d conditioning - transformers' hidden_states[2]| = %.3g\n", ranks, r, dc);
    EXPECT_LE(dc, 1e-4) << "rank " << r << " conditioning";
  }
}

TEST(VisionPrompt, HiddenStatesWithTheImageEqualTheReference) {
  expect_presented_hidden(1);
}
TEST(VisionPromptTp, HiddenStatesWithTheImageAtTp2) {
  expect_presented_hidden(2);
}

TEST(VisionPrompt, VisualRowsMustMatchTheMask) {
  const auto enc = TextEncoder::load(tower_dir(), 2);
  auto ids = at::tensor(std::vector<int64_t>{1, 252, 252, 3}, at::kLong);
  auto pos = at::arange(4, at::kLong).unsqueeze(0).expand({3, 4}).contiguous();
  test::expect_error(
      [&] {
        enc.forward(ids, pos, VisualRows{ids.eq(252), at::zeros({3, 64}), {}});
      },
      ErrorKind::kInvalidArgument, {"2 image tokens need visual embeddings [2, 64]", "[3, 64]"});
  test::expect_error(
      [&] {
        enc.forward(ids, pos, VisualRows{ids.eq(252).narrow(0, 0, 3), at::zeros({2, 64}), {}});
      },
      ErrorKind::kInvalidArgument, {"mask must be bool [4]"});
}

TEST(VisionPrompt, TheH3TokenizerGivesThePictureLabel) {
  const auto tok = Tokenizer::load(test::shipped_tokenizer_dir());
  const auto config = VisionConfig::load(test::data_dir() + "/h3-release/text_encoder");
  const auto p = present_image(tok, "a cat", config, {1, 4, 6});
  const auto label = tok.encode(kPictureLabel);
  ASSERT_GE(p.ids.size(), label.size() + 8);
  EXPECT_EQ(std::vector<int64_t>(p.ids.begin(), p.ids.begin() + label.size()), label);
  EXPECT_EQ(p.ids[label.size()], 151652);
  EXPECT_EQ(p.ids[label.size() + 1], 151655);
  EXPECT_EQ(p.ids[label.size() + 7], 151653);
  EXPECT_EQ(p.ids.size(), label.size() + 8 + tok.encode("a cat").size());
}

}  // namespace
}  // namespace h3::text
