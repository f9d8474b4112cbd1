// Weights: canonical names over both layouts, tensor-parallel shards that own
// their storage, conversion checked on values that expose a wrong permutation,
// and the golden tiny DiT and VAE in both layouts.
#include "io/weights.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>

#include "dit/config.h"
#include "dit/parameters.h"
#include "io/shard_plan.h"
#include "io_test_util.h"

namespace h3::io {
namespace {

using testing::expect_error;
using testing::TempDir;

constexpr int64_t kHeads = 4, kHeadDim = 3, kHidden = 8, kFfn = 8, kIn = 5;

// Distinct values everywhere, so any wrong row or column order shows.
at::Tensor distinct(std::vector<int64_t> shape, int64_t offset) {
  int64_t n = c10::multiply_integers(shape);
  return (at::randperm(n, at::kLong).to(at::kFloat) + static_cast<float>(offset)).reshape(shape);
}

// A small DiT-shaped model in canonical names covering every split kind, and the split this
// test loads each tensor with (the DiT's own splits are its declaration's, dit/parameters.h).
std::map<std::string, Split> model_splits;
std::map<std::string, at::Tensor> canonical_model() {
  at::manual_seed(7);
  std::map<std::string, at::Tensor> m;
  int64_t off = 0;
  auto add = [&](const std::string& n, std::vector<int64_t> s, Split split = Split::kReplicated) {
    m[n] = distinct(s, off);
    model_splits[n] = split;
    off += 100000;
  };
  for (const std::string b : {"transformer_blocks.0.", "token_refiner.refiner_blocks.1."}) {
    add(b + "attn.to_q.weight", {kHeads * kHeadDim, kHidden}, Split::kColumn);
    add(b + "attn.to_k.weight", {kHeads * kHeadDim, kHidden}, Split::kColumn);
    add(b + "attn.to_v.weight", {kHeads * kHeadDim, kHidden}, Split::kColumn);
    add(b + "attn.norm_q.weight", {kHeadDim});
    add(b + "attn.to_out.0.weight", {kHidden, kHeads * kHeadDim}, Split::kRow);
    add(b + "ff.net.0.proj.weight", {2 * kFfn, kHidden}, Split::kFusedColumn);
    add(b + "ff.net.2.weight", {kHidden, kFfn}, Split::kRow);
    add(b + "norm1.weight", {kHidden});
  }
  add("transformer_blocks.0.adaln_proj.linear.weight", {18 * kHidden, kIn}, Split::kColumn);
  add("transformer_blocks.0.adaln_proj.linear.bias", {18 * kHidden}, Split::kColumn);
  add("proj_in.weight", {kHidden, 6});
  add("proj_in.bias", {kHidden});
  m["scale_0d"] = at::scalar_tensor(3.5, at::kFloat);
  m["empty"] = at::zeros({0, 4});
  model_splits["scale_0d"] = model_splits["empty"] = Split::kReplicated;
  return m;
}

// The same weights in the native layout (fused per-head qkv, fc1 as [gate; up]).
std::vector<std::pair<std::string, at::Tensor>> to_native(const std::map<std::string, at::Tensor>& c) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [blk, nb] : std::vector<std::pair<std::string, std::string>>{
           {"transformer_blocks.0.", "blocks.0."},
           {"token_refiner.refiner_blocks.1.", "token_refiner.blocks.1."}}) {
    auto q = c.at(blk + "attn.to_q.weight").reshape({kHeads, 1, kHeadDim, kHidden});
    auto k = c.at(blk + "attn.to_k.weight").reshape({kHeads, 1, kHeadDim, kHidden});
    auto v = c.at(blk + "attn.to_v.weight").reshape({kHeads, 1, kHeadDim, kHidden});
    out.push_back(
        {nb + "attn.qkv_proj.weight", at::cat({q, k, v}, 1).reshape({3 * kHeads * kHeadDim, kHidden})});
    out.push_back({nb + "attn.q_norm.weight", c.at(blk + "attn.norm_q.weight")});
    out.push_back({nb + "attn.out_proj.weight", c.at(blk + "attn.to_out.0.weight")});
    auto ff = c.at(blk + "ff.net.0.proj.weight").chunk(2, 0);  // [up; gate]
    out.push_back({nb + "mlp.fc1.weight", at::cat({ff[1], ff[0]}, 0)});
    out.push_back({nb + "mlp.fc2.weight", c.at(blk + "ff.net.2.weight")});
    out.push_back({nb + "norm1.weight", c.at(blk + "norm1.weight")});
  }
  out.push_back({"blocks.0.adaln_proj.linear.weight", c.at("transformer_blocks.0.adaln_proj.linear.weight")});
  out.push_back({"blocks.0.adaln_proj.linear.bias", c.at("transformer_blocks.0.adaln_proj.linear.bias")});
  out.push_back({"video_patch_proj.weight", c.at("proj_in.weight")});
  out.push_back({"video_patch_proj.bias", c.at("proj_in.bias")});
  out.push_back({"rope.inv_freq", at::ones({16})});
  return out;
}

// What a rank must hold, computed independently of the loader.
at::Tensor expected_shard(const at::Tensor& full, Split split, int rank, int size) {
  switch (split) {
    case Split::kReplicated: return full;
    case Split::kColumn: return full.chunk(size, 0)[rank];
    case Split::kRow: return full.chunk(size, 1)[rank];
    case Split::kFusedColumn: {
      auto halves = full.chunk(2, 0);
      return at::cat({halves[0].chunk(size, 0)[rank], halves[1].chunk(size, 0)[rank]}, 0);
    }
  }
  return {};
}

const char* split_name(Split s) {
  switch (s) {
    case Split::kReplicated: return "replicated";
    case Split::kColumn: return "column";
    case Split::kRow: return "row";
    case Split::kFusedColumn: return "fused column";
  }
  return "?";
}

bool inside(const void* p, const SafetensorsFile& f) {
  auto* b = static_cast<const uint8_t*>(p);
  return b >= f.mapped_data() && b < f.mapped_data() + f.mapped_size();
}

class ShardTest : public ::testing::TestWithParam<bool /*native*/> {};

TEST_P(ShardTest, EveryRankOwnsExactlyItsSlice) {
  const bool native = GetParam();
  TempDir dir;
  auto model = canonical_model();
  std::vector<std::pair<std::string, at::Tensor>> stored =
      native ? to_native(model) : std::vector<std::pair<std::string, at::Tensor>>(model.begin(), model.end());
  if (native) {  // native DiT names are strict: the extra 0-d and empty tensors exist only in the diffusers
                 // file
    model.erase("scale_0d");
    model.erase("empty");
  }
  const std::string path = dir / "model.safetensors";
  write_safetensors(path, stored);

  std::vector<std::tuple<std::string, Split, int, int, at::Tensor>> kept;  // name, split, rank, tp, shard
  std::set<Split> seen;
  {
    Weights w = Weights::open(path, {ModelKind::kDit, kHeads, kHeadDim});
    EXPECT_EQ(w.is_native(), native);
    std::vector<std::string> want;
    for (const auto& [n, t] : model) want.push_back(n);
    EXPECT_EQ(w.names(), want);
    const auto& files = w.checkpoint().files();
    for (int tp : {1, 2, 4}) {
      for (const auto& [name, full] : model) {
        const Split split = model_splits.at(name);
        seen.insert(split);
        EXPECT_EQ(w.shape(name), full.sizes().vec());
        for (int r = 0; r < tp; ++r) {
          SCOPED_TRACE(name + " " + split_name(split) + " rank " + std::to_string(r) + "/" +
                       std::to_string(tp));
          at::Tensor s = w.load(name, {split, r, tp});
          at::Tensor want_s = expected_shard(full, split, r, tp);
          EXPECT_EQ(w.shard_shape(name, {split, r, tp}), want_s.sizes().vec());
          ASSERT_EQ(s.sizes(), want_s.sizes());
          EXPECT_TRUE(at::equal(s, want_s));
          EXPECT_TRUE(s.is_contiguous());
          EXPECT_EQ(s.storage().nbytes(), static_cast<size_t>(s.numel()) * s.element_size());
          EXPECT_EQ(s.storage_offset(), 0);
          for (const auto& f : files) EXPECT_FALSE(inside(s.storage().data(), *f)) << "aliases the mapping";
          kept.emplace_back(name, split, r, tp, s);
        }
      }
    }
    EXPECT_TRUE(testing::is_mapped(path));
  }
  EXPECT_EQ(seen, (std::set<Split>{Split::kReplicated, Split::kColumn, Split::kRow, Split::kFusedColumn}));
  // The Weights is gone: nothing may still hold the mapping, and every shard stays valid.
  EXPECT_FALSE(testing::is_mapped(path));
  for (const auto& [name, split, r, tp, s] : kept) {
    EXPECT_TRUE(at::equal(s, expected_shard(model.at(name), split, r, tp))) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ShardTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "native" : "diffusers"; });

TEST(Weights, LoadsToAnotherDtype) {
  TempDir dir;
  auto model = canonical_model();
  write_safetensors(dir / "m.safetensors", {model.begin(), model.end()});
  Weights w = Weights::open(dir / "m.safetensors", {ModelKind::kDit, kHeads, kHeadDim});
  const std::string n = "transformer_blocks.0.ff.net.0.proj.weight";
  at::Tensor s = w.load(n, {Split::kFusedColumn, 1, 2}, {at::kBFloat16, c10::Device(c10::kCPU)});
  EXPECT_EQ(s.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(s, expected_shard(model.at(n), Split::kFusedColumn, 1, 2).to(at::kBFloat16)));
  EXPECT_EQ(s.storage().nbytes(), static_cast<size_t>(s.numel()) * 2);
  EXPECT_EQ(w.dtype(n), at::kFloat);
}

TEST(Weights, LoadsStraightToACudaDevice) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device: device placement not exercised";
  TempDir dir;
  auto model = canonical_model();
  write_safetensors(dir / "m.safetensors", {model.begin(), model.end()});
  Weights w = Weights::open(dir / "m.safetensors", {ModelKind::kDit, kHeads, kHeadDim});
  const std::string n = "transformer_blocks.0.ff.net.2.weight";
  at::Tensor g = w.load(n, {Split::kRow, 1, 2}, {at::kHalf, c10::Device(c10::kCUDA, 0)});
  EXPECT_TRUE(g.is_cuda());
  EXPECT_TRUE(g.is_contiguous());
  EXPECT_TRUE(at::equal(g.cpu(), expected_shard(model.at(n), Split::kRow, 1, 2).to(at::kHalf)));
}

// A load reads the mapping block by block and gives each block's pages back:
// afterwards none of the source stays resident in this process, where a plain
// copy of the view leaves all of it.
TEST(Weights, LoadingLeavesNoSourcePagesResident) {
  TempDir dir;
  const std::string path = dir / "big.safetensors";
  const std::string name = "transformer_blocks.0.ff.net.2.weight";
  write_safetensors(path, {{name, at::rand({2048, 4096})}});  // 32 MiB
  Weights w = Weights::open(path, {ModelKind::kDit, 1, 1});
  for (Split split : {Split::kColumn, Split::kRow, Split::kFusedColumn, Split::kReplicated}) {
    at::Tensor s = w.load(name, {split, 1, 4});
    EXPECT_LT(testing::mapped_rss_kib(path), 1024u) << split_name(split);
  }
  at::Tensor copy = w.checkpoint().view(name).clone();
  EXPECT_GE(testing::mapped_rss_kib(path), 30u * 1024);  // the measure does see resident source pages
}

TEST(Weights, ShardsThatDoNotFitAreClearErrors) {
  TempDir dir;
  auto model = canonical_model();
  write_safetensors(dir / "m.safetensors", {model.begin(), model.end()});
  Weights w = Weights::open(dir / "m.safetensors", {ModelKind::kDit, kHeads, kHeadDim});
  const std::string q = "transformer_blocks.0.attn.to_q.weight";
  expect_error([&] { w.load(q, {Split::kColumn, 2, 2}); }, ErrorKind::kInvalidArgument, {q, "rank 2 of 2"});
  expect_error(
      [&] {
        w.load(q, {Split::kColumn, 0, 5});
      },
      ErrorKind::kInvalidArgument, {q, "does not divide dim 0 (12)"});
  expect_error(
      [&] {
        w.load("proj_in.bias", {Split::kRow, 0, 2});
      },
      ErrorKind::kInvalidArgument, {"proj_in.bias", "needs a 2-D tensor"});
  expect_error([&] { w.load("scale_0d", {Split::kColumn, 0, 1}); }, ErrorKind::kInvalidArgument, {"0-d"});
  expect_error([&] { w.load("nope"); }, ErrorKind::kNotFound, {"'nope'", dir / "m.safetensors"});
}

TEST(Weights, ShapeThatDisagreesWithTheConfig) {
  TempDir dir;
  auto model = canonical_model();
  write_safetensors(dir / "d.safetensors", {model.begin(), model.end()});
  write_safetensors(dir / "n.safetensors", to_native(model));
  // 4 heads x 3 stored; a config of 2 heads x 3 (or 4 x 4) disagrees.
  expect_error(
      [&] {
        Weights::open(dir / "d.safetensors", {ModelKind::kDit, 2, kHeadDim});
      },
      ErrorKind::kMismatch, {"attn.to_", "has 12 rows", "2 heads x head_dim 3", "needs 6"});
  expect_error(
      [&] {
        Weights::open(dir / "n.safetensors", {ModelKind::kDit, kHeads, 4});
      },
      ErrorKind::kMismatch, {"attn.qkv_proj.weight", "has 36 rows", "needs 3 x 16"});
  expect_error(
      [&] {
        Weights::open(dir / "n.safetensors", {ModelKind::kDit, 0, 4});
      },
      ErrorKind::kInvalidArgument, {"num_heads"});
}

TEST(Weights, UnknownNativeNameAndMixedLayoutsAreErrors) {
  TempDir dir;
  write_safetensors(dir / "u.safetensors", {{"blocks.0.attn.mystery.weight", at::zeros({2})}});
  expect_error(
      [&] {
        Weights::open(dir / "u.safetensors", {ModelKind::kDit, 1, 1});
      },
      ErrorKind::kFormat, {"blocks.0.attn.mystery.weight", "no known diffusers name"});
  // Native detected, so a diffusers name beside native ones is refused by name.
  write_safetensors(dir / "m.safetensors",
                    {{"video_patch_proj.weight", at::zeros({2, 2})}, {"proj_in.weight", at::zeros({2, 2})}});
  expect_error(
      [&] {
        Weights::open(dir / "m.safetensors", {ModelKind::kDit, 1, 1});
      },
      ErrorKind::kFormat, {"'proj_in.weight'", "no known diffusers name"});
  // VAE encoder names pass through, so two spellings of one tensor collide.
  write_safetensors(dir / "v.safetensors",
                    {{"decoder.x_embedder.weight", at::zeros({2, 2})},
                     {"encoder.down.0.block.0.conv1.weight", at::zeros({2})},
                     {"encoder.down_blocks.0.resnets.0.conv1.weight", at::zeros({2})}});
  expect_error(
      [&] {
        Weights::open(dir / "v.safetensors", {ModelKind::kVideoVae, 1, 1});
      },
      ErrorKind::kFormat,
      {"'encoder.down.0.block.0.conv1.weight'", "'encoder.down_blocks.0.resnets.0.conv1.weight'",
       "both give"});
}

// Loading the native file must give exactly the diffusers file's tensors.
void expect_layouts_equal(const std::string& native_path, const std::string& diffusers_path,
                          const LayoutParams& p, const std::map<std::string, Split>& splits = {}) {
  Weights n = Weights::open(native_path, p);
  Weights d = Weights::open(diffusers_path, p);
  EXPECT_TRUE(n.is_native());
  EXPECT_FALSE(d.is_native());
  ASSERT_EQ(n.names(), d.names());
  for (const auto& name : d.names()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(n.shape(name), d.shape(name));
    EXPECT_EQ(n.dtype(name), d.dtype(name));
    EXPECT_TRUE(at::equal(n.load(name), d.checkpoint().view(name)));
    if (splits.empty()) continue;
    for (int r = 0; r < 2; ++r) {
      Shard s{splits.at(name), r, 2};
      EXPECT_TRUE(at::equal(n.load(name, s), d.load(name, s)));
    }
  }
}

TEST(Weights, GoldenTinyDitNativeEqualsDiffusers) {
  // Shards compared as the DiT's loader takes them: split by the declaration.
  const std::string diffusers = testing::test_data("golden/h3_dit/transformer_tiny");
  std::map<std::string, Split> splits;
  for (const auto& s : dit::dit_parameters(dit::DitConfig::load(diffusers))) splits[s.name] = s.split;
  expect_layouts_equal(testing::test_data("golden/h3_dit/transformer_tiny_native/model.safetensors"),
                       diffusers, {ModelKind::kDit, 2, 128}, splits);
}

TEST(Weights, GoldenTinyVaeNativeEqualsDiffusers) {
  expect_layouts_equal(testing::test_data("golden/h3_vae/native/source/model.safetensors"),
                       testing::test_data("golden/h3_vae/diffusers"), {ModelKind::kVideoVae, 2, 32});
}

TEST(ShardPlan, TpMustDivideHeadsFfnAndAdaln) {
  // The release: 56 heads, FFN 14336, AdaLN 96768.
  for (int tp : {1, 2, 4, 7, 8}) EXPECT_NO_THROW(check_dit_tp(tp, 56, 14336, 96768)) << tp;
  expect_error([] { check_dit_tp(3, 56, 14336, 96768); }, ErrorKind::kInvalidArgument,
               {"3", "attention heads (56)"});
  expect_error([] { check_dit_tp(2, 2, 255, 96768); }, ErrorKind::kInvalidArgument, {"FFN width (255)"});
  expect_error([] { check_dit_tp(2, 2, 256, 2305); }, ErrorKind::kInvalidArgument, {"AdaLN width (2305)"});
  expect_error([] { check_dit_tp(0, 2, 256, 2304); }, ErrorKind::kInvalidArgument, {">= 1"});
}

}  // namespace
}  // namespace h3::io
