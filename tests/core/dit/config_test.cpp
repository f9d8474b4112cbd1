// Configs of both release schemas, and the full-size model's parameter set built from them as
// shapes only, checked against the release's tensor index.
#include "dit/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "dit/parameters.h"
#include "dit/transformer.h"
#include "dit_test_util.h"
#include "h3/error.h"
#include "io/layout.h"
#include "io/shard_plan.h"

namespace h3::dit {
namespace {

using testing::data_dir;
using testing::golden_dir;

std::string release(const std::string& rel) {
  return data_dir() + "/h3-release/" + rel;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void expect_same_model(const DitConfig& a, const DitConfig& b) {
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_refiner_layers, b.num_refiner_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.ffn_dim, b.ffn_dim);
  EXPECT_EQ(a.in_channels, b.in_channels);
  EXPECT_EQ(a.audio_in_channels, b.audio_in_channels);
  EXPECT_EQ(a.patch, b.patch);
  EXPECT_EQ(a.text_dim, b.text_dim);
  EXPECT_EQ(a.freq_dim, b.freq_dim);
  EXPECT_EQ(a.time_embed_hidden_dim, b.time_embed_hidden_dim);
  EXPECT_EQ(a.time_embed_dim, b.time_embed_dim);
  EXPECT_EQ(a.rope_freq_dim, b.rope_freq_dim);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
}

TEST(DitConfig, ReleaseSchemasDescribeTheSameModel) {
  auto d = DitConfig::load(release("transformer/config.json"));
  auto n = DitConfig::load(release("FL2VA/transformer"));
  EXPECT_EQ(d.schema, ConfigSchema::kDiffusers);
  EXPECT_EQ(n.schema, ConfigSchema::kNative);
  expect_same_model(d, n);
  EXPECT_EQ(d.hidden_size, 5376);
  EXPECT_EQ(d.num_layers, 50);
  EXPECT_EQ(d.num_refiner_layers, 2);
  EXPECT_EQ(d.num_heads, 56);
  EXPECT_EQ(d.head_dim, 128);
  EXPECT_EQ(d.ffn_dim, 14336);
  EXPECT_EQ(d.text_dim, 5120);
  EXPECT_EQ(d.time_embed_dim, 2688);
  EXPECT_EQ(d.adaln_width(), 96768);
  EXPECT_EQ(d.video_row_width(), 96);
  EXPECT_EQ(d.rope_dims(), 96);
  expect_same_model(DitConfig::load(golden_dir() + "/transformer_tiny"),
                    DitConfig::load(golden_dir() + "/transformer_tiny_native"));
}

TEST(DitConfig, BadConfigsAreFormatErrors) {
  auto kind_of = [](const std::string& text) {
    try {
      DitConfig::parse(text, "x/config.json");
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("x/config.json"), std::string::npos);
      return e.kind();
    }
    return ErrorKind::kInternal;
  };
  EXPECT_EQ(kind_of("{not json"), ErrorKind::kFormat);
  EXPECT_EQ(kind_of(R"({"hidden_size": 64})"), ErrorKind::kFormat);
  auto j = read_json(golden_dir() + "/transformer_tiny_native/config.json");
  j["adaln_out_features"] = 100;
  EXPECT_EQ(kind_of(j.dump()), ErrorKind::kFormat);
  j = read_json(golden_dir() + "/transformer_tiny/config.json");
  j["attention_head_dim"] = 64;  // fewer than the 96 rotated dims
  EXPECT_EQ(kind_of(j.dump()), ErrorKind::kFormat);
  j["attention_head_dim"] = "wide";
  EXPECT_EQ(kind_of(j.dump()), ErrorKind::kFormat);
  try {
    DitConfig::load(data_dir() + "/no/such/folder");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
  }
}

TEST(DitConfig, TensorParallelMustDivideTheHeads) {
  auto c = DitConfig::load(release("transformer/config.json"));
  EXPECT_NO_THROW(check_tp(c, 1));
  EXPECT_NO_THROW(check_tp(c, 4));
  EXPECT_NO_THROW(check_tp(c, 8));
  try {
    check_tp(c, 3);
    FAIL() << "3 does not divide 56 heads";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("attention heads (56)"), std::string::npos);
  }
  EXPECT_THROW(check_tp(DitConfig::load(golden_dir() + "/transformer_tiny"), 4), Error);  // 2 heads
}

TEST(FullSizeModel, ParameterSetMatchesTheDiffusersIndex) {
  auto c = DitConfig::load(release("transformer/config.json"));
  auto specs = dit_parameters(c);
  auto index = read_json(release("transformer/diffusion_pytorch_model.safetensors.index.json"));
  std::set<std::string> in_index;
  for (auto& [name, file] : index["weight_map"].items()) in_index.insert(name);
  std::set<std::string> built;
  for (const auto& s : specs) built.insert(s.name);
  EXPECT_EQ(in_index.size(), 638u);
  EXPECT_EQ(built.size(), specs.size());
  EXPECT_EQ(built, in_index);
  auto n = count_parameters(specs);
  EXPECT_NEAR(n.total / 1e9, 33.12, 0.005);
  EXPECT_NEAR(n.adaln / 1e9, 13.0, 0.05);
  // The index's byte count pins every shape: bf16 everywhere but the 12 fp32 tensors.
  EXPECT_EQ(n.release_bytes, index["metadata"]["total_size"].get<int64_t>());
  int fp32 = 0;
  for (const auto& s : specs) fp32 += s.fp32;
  EXPECT_EQ(fp32, 12);
}

TEST(FullSizeModel, DeclaredSplitsFollowTheH3MapAndDivideTheShapes) {
  auto c = DitConfig::load(release("transformer/config.json"));
  std::map<io::Split, int> per_split;
  std::map<std::string, io::Split> split_of;
  for (const auto& s : dit_parameters(c)) {
    split_of[s.name] = s.split;
    ++per_split[s.split];
    const auto local = s.local_shape(8);
    ASSERT_EQ(local.size(), s.shape.size()) << s.name;
    int64_t ratio = 1;
    for (size_t d = 0; d < local.size(); ++d) ratio *= s.shape[d] / local[d];
    EXPECT_EQ(ratio, s.split == io::Split::kReplicated ? 1 : 8) << s.name;
  }
  // Every block: q/k/v and the AdaLN weight and bias by output rows, ff.net.0.proj by halves,
  // to_out.0 and ff.net.2 by input columns; the refiner blocks likewise, without AdaLN.
  const int blocks = static_cast<int>(c.num_layers), refiner = static_cast<int>(c.num_refiner_layers);
  EXPECT_EQ(per_split[io::Split::kColumn], 5 * blocks + 3 * refiner);
  EXPECT_EQ(per_split[io::Split::kFusedColumn], blocks + refiner);
  EXPECT_EQ(per_split[io::Split::kRow], 2 * (blocks + refiner));
  // By name, as docs/h3-model.md §10.4 gives the map (the loader shards by these declarations).
  using io::Split;
  for (const auto& [name, split] : std::vector<std::pair<std::string, Split>>{
           {"transformer_blocks.3.attn.to_q.weight", Split::kColumn},
           {"transformer_blocks.3.attn.to_k.weight", Split::kColumn},
           {"token_refiner.refiner_blocks.0.attn.to_v.weight", Split::kColumn},
           {"transformer_blocks.3.adaln_proj.linear.weight", Split::kColumn},
           {"transformer_blocks.3.adaln_proj.linear.bias", Split::kColumn},
           {"transformer_blocks.3.ff.net.0.proj.weight", Split::kFusedColumn},
           {"token_refiner.refiner_blocks.1.ff.net.0.proj.weight", Split::kFusedColumn},
           {"transformer_blocks.3.attn.to_out.0.weight", Split::kRow},
           {"transformer_blocks.3.ff.net.2.weight", Split::kRow},
           {"proj_in.weight", Split::kReplicated},
           {"context_embedder.weight", Split::kReplicated},
           {"time_embedder.linear_1.weight", Split::kReplicated},
           {"norm_out.linear.weight", Split::kReplicated},
           {"norm_out.norm.weight", Split::kReplicated},
           {"proj_out.weight", Split::kReplicated},
           {"audio_proj_out.bias", Split::kReplicated},
           {"transformer_blocks.0.norm1.weight", Split::kReplicated},
           {"transformer_blocks.0.attn.norm_q.weight", Split::kReplicated},
           {"token_refiner.final_norm.weight", Split::kReplicated}}) {
    ASSERT_TRUE(split_of.count(name)) << name;
    EXPECT_EQ(split_of.at(name), split) << name;
  }
}

TEST(FullSizeModel, ParameterSetMatchesTheNativeIndexAfterConversion) {
  auto c = DitConfig::load(release("FL2VA/transformer/config.json"));
  auto index = read_json(release("FL2VA/transformer/model.safetensors.index.json"));
  std::vector<std::string> stored;
  for (auto& [name, file] : index["weight_map"].items()) stored.push_back(name);
  EXPECT_EQ(stored.size(), 535u);
  ASSERT_TRUE(io::is_native_layout(io::ModelKind::kDit, stored));
  std::set<std::string> converted;
  for (const auto& n : stored) {
    for (const auto& piece : io::native_to_canonical(io::ModelKind::kDit, n)) converted.insert(piece.name);
  }
  std::set<std::string> built;
  for (const auto& s : dit_parameters(c)) built.insert(s.name);
  EXPECT_EQ(built, converted);
  // Same bytes as the diffusers layout plus the stored rope.inv_freq (fp32 [16]).
  EXPECT_EQ(count_parameters(dit_parameters(c)).release_bytes + 16 * 4,
            index["metadata"]["total_size"].get<int64_t>());
}

}  // namespace
}  // namespace h3::dit
