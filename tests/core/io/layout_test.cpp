// Native -> diffusers names on the release's own index files: every native DiT
// name maps, and the result is exactly the diffusers release's name set.
#include "io/layout.h"

#include <gtest/gtest.h>

#include <set>

#include "io/checkpoint.h"
#include "io/shard_plan.h"
#include "io_test_util.h"

namespace h3::io {
namespace {

std::vector<std::string> keys(const CheckpointIndex& i) {
  std::vector<std::string> out;
  for (const auto& [n, f] : i.weight_map) out.push_back(n);
  return out;
}

TEST(Layout, ReleaseNativeDitNamesMapOntoTheDiffusersRelease) {
  auto native =
      read_checkpoint_index(testing::test_data("h3-release/FL2VA/transformer/model.safetensors.index.json"));
  auto diff = read_checkpoint_index(
      testing::test_data("h3-release/transformer/diffusion_pytorch_model.safetensors.index.json"));
  EXPECT_TRUE(is_native_layout(ModelKind::kDit, keys(native)));
  EXPECT_FALSE(is_native_layout(ModelKind::kDit, keys(diff)));
  std::multiset<std::string> mapped;
  int qkv = 0, swapped = 0, dropped = 0;
  for (const auto& [n, f] : native.weight_map) {
    auto pieces = native_to_canonical(ModelKind::kDit, n);
    if (pieces.empty()) ++dropped;
    for (const auto& p : pieces) {
      mapped.insert(p.name);
      qkv += p.how == Rearrange::kQkvPart;
      swapped += p.how == Rearrange::kSwapHalves;
    }
  }
  EXPECT_EQ(dropped, 1);   // rope.inv_freq
  EXPECT_EQ(qkv, 3 * 52);  // 50 blocks + 2 refiner blocks
  EXPECT_EQ(swapped, 52);
  auto d = keys(diff);
  EXPECT_EQ(mapped, std::multiset<std::string>(d.begin(), d.end()));
  // What each split kind covers on these names: the declaration's (FullSizeModel tests, core_dit).
}

TEST(Layout, VaeDecoderRenames) {
  using P = std::vector<CanonicalPiece>;
  auto one = [](const std::string& n) {
    P p = native_to_canonical(ModelKind::kVideoVae, n);
    return p.size() == 1 ? p[0].name : std::string("<") + std::to_string(p.size()) + ">";
  };
  EXPECT_EQ(one("decoder.x_embedder.weight"), "decoder.proj_in.weight");
  EXPECT_EQ(one("decoder.transformer_blocks.7.attn.to_out.bias"),
            "decoder.transformer_blocks.7.attn.to_out.0.bias");
  EXPECT_EQ(one("decoder.transformer_blocks.7.ff.w2.weight"), "decoder.transformer_blocks.7.ff.net.2.weight");
  EXPECT_EQ(one("decoder.transformer_blocks.7.scale1"), "decoder.transformer_blocks.7.scale1");
  EXPECT_EQ(one("encoder.down.2.block.1.nin_shortcut.weight"),
            "encoder.down_blocks.2.resnets.1.conv_shortcut.weight");
  EXPECT_EQ(one("encoder.down.2.block.0.conv1.bias"), "encoder.down_blocks.2.resnets.0.conv1.bias");
  EXPECT_EQ(one("encoder.down.0.downsample.conv.weight"), "encoder.down_blocks.0.downsamplers.0.conv.weight");
  EXPECT_EQ(one("quant_conv.weight"), "quant_conv.weight");
  EXPECT_TRUE(native_to_canonical(ModelKind::kVideoVae, "decoder.mask_token").empty());
  P qkv = native_to_canonical(ModelKind::kVideoVae, "decoder.transformer_blocks.0.attn.to_qkv.bias");
  ASSERT_EQ(qkv.size(), 3u);
  EXPECT_EQ(qkv[2].name, "decoder.transformer_blocks.0.attn.to_v.bias");
  EXPECT_EQ(qkv[2].how, Rearrange::kQkvPart);
  EXPECT_EQ(qkv[2].part, 2);
  P ff = native_to_canonical(ModelKind::kVideoVae, "decoder.transformer_blocks.0.ff.w1.weight");
  ASSERT_EQ(ff.size(), 1u);
  EXPECT_EQ(ff[0].how, Rearrange::kSwapHalves);
  EXPECT_THROW(native_to_canonical(ModelKind::kVideoVae, "decoder.transformer_blocks.0.odd"), Error);
  EXPECT_THROW(native_to_canonical(ModelKind::kVideoVae, "decoder.unknown"), Error);
}

}  // namespace
}  // namespace h3::io
