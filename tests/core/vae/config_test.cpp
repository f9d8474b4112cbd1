// The decoder config from the release's diffusers and native layouts.
#include "vae/config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "h3/error.h"

namespace {

namespace fs = std::filesystem;
using h3::vae::VaeConfig;

std::string data(const std::string& rel) {
  const char* root = std::getenv("H3_TEST_DATA");
  return std::string(root ? root : "tests/data") + "/" + rel;
}

void expect_release(const VaeConfig& c) {
  EXPECT_EQ(c.latent_channels, 24);
  EXPECT_EQ(c.out_channels, 3);
  EXPECT_EQ(c.patch_size, 16);
  EXPECT_EQ(c.patch_size_t, 4);
  EXPECT_EQ(c.num_layers, 36);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.dim(), 2048);
  EXPECT_EQ(c.ffn_inner(), 8192);
  EXPECT_EQ(c.num_register_tokens, 4);
  EXPECT_EQ(c.rope_dim(), 48);
  EXPECT_DOUBLE_EQ(c.rope_theta, 100.0);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_EQ(c.clip_length, 17);
  EXPECT_EQ(c.token_drop, 3);
  EXPECT_TRUE(c.tiling);
  EXPECT_EQ(c.tile_size, 256);
  EXPECT_EQ(c.tile_overlap_min, 64);
  EXPECT_EQ(c.patch_values(), 3072);
  ASSERT_EQ(c.latents_mean.size(), 24u);
  ASSERT_EQ(c.latents_std.size(), 24u);
  EXPECT_DOUBLE_EQ(c.latents_mean[0], 0.858090341091156);
  EXPECT_DOUBLE_EQ(c.latents_std[0], 1.2223774194717407);
}

TEST(VaeConfig, ReleaseDiffusers) {
  const auto src = h3::vae::find_vae(data("h3-release/vae"));
  EXPECT_FALSE(src.native);
  expect_release(src.config);
  EXPECT_EQ(src.weights_path, data("h3-release/vae"));
}

TEST(VaeConfig, ReleaseNative) {
  const auto src = h3::vae::find_vae(data("h3-release/FL2VA/video_vae"));
  EXPECT_TRUE(src.native);
  expect_release(src.config);
  EXPECT_EQ(fs::path(src.weights_path).filename(), "model.safetensors");
  // The two layouts' statistics parse to identical doubles.
  const auto diff = h3::vae::find_vae(data("h3-release/vae"));
  EXPECT_EQ(src.config.latents_mean, diff.config.latents_mean);
  EXPECT_EQ(src.config.latents_std, diff.config.latents_std);
}

TEST(VaeConfig, GoldenTinyBothLayoutsAgree) {
  const auto d = h3::vae::find_vae(data("golden/h3_vae/diffusers"));
  const auto n = h3::vae::find_vae(data("golden/h3_vae/native"));
  for (const VaeConfig* c : {&d.config, &n.config}) {
    EXPECT_EQ(c->num_layers, 2);
    EXPECT_EQ(c->num_heads, 2);
    EXPECT_EQ(c->head_dim, 32);
    EXPECT_EQ(c->rope_dim(), 24);
    EXPECT_EQ(c->num_register_tokens, 4);
    EXPECT_EQ(c->patch_size, 16);
  }
  EXPECT_EQ(d.config.latents_mean, n.config.latents_mean);
  EXPECT_EQ(d.config.latents_std, n.config.latents_std);
}

void expect_format_error(const std::string& json, const std::string& needle) {
  try {
    h3::vae::parse_diffusers_config(json, "cfg.json");
    FAIL() << "expected an error for " << json;
  } catch (const h3::Error& e) {
    EXPECT_EQ(e.kind(), h3::ErrorKind::kFormat);
    const std::string what = e.what();
    EXPECT_NE(what.find("cfg.json"), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

std::string stats(int n) {
  std::string m = "[";
  for (int i = 0; i < n; ++i) m += (i ? ",1.0" : "1.0");
  return m + "]";
}

TEST(VaeConfig, BadConfigsAreNamed) {
  expect_format_error("{", "not valid JSON");
  expect_format_error("{\"latents_mean\": []}", "decoder_num_layers");
  const std::string ok =
      "\"decoder_num_layers\": 1, \"latents_mean\": " + stats(24) + ", \"latents_std\": " + stats(24);
  EXPECT_NO_THROW(h3::vae::parse_diffusers_config("{" + ok + "}", "cfg.json"));
  expect_format_error(
      "{\"decoder_num_layers\": 1, \"latents_mean\": " + stats(3) + ", \"latents_std\": " + stats(24) + "}",
      "latents_mean has 3 values");
  expect_format_error("{" + ok + ", \"decoder_num_attention_heads\": \"x\"}", "decoder_num_attention_heads");
  expect_format_error("{" + ok + ", \"decoder_rope_dim_ratio\": 0.5}", "multiple of 6");
  expect_format_error("{" + ok + ", \"token_drop\": 5}", "token_drop");
}

TEST(VaeConfig, MissingFolderAndNativeSourceAlone) {
  try {
    h3::vae::find_vae(data("no/such/folder"));
    FAIL();
  } catch (const h3::Error& e) {
    EXPECT_EQ(e.kind(), h3::ErrorKind::kNotFound);
  }
  try {
    h3::vae::find_vae(data("h3-release/FL2VA/video_vae/source"));
    FAIL();
  } catch (const h3::Error& e) {
    EXPECT_EQ(e.kind(), h3::ErrorKind::kFormat);
    EXPECT_NE(std::string(e.what()).find("wrapper"), std::string::npos) << e.what();
  }
}

}  // namespace
