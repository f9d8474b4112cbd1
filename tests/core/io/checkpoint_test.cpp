// Checkpoints: single files, sharded indexes, folders; index/shard consistency
// errors; the release's index files.
#include "io/checkpoint.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "io_test_util.h"

namespace h3::io {
namespace {

using testing::expect_error;
using testing::TempDir;

void write_index(const std::string& path, const std::string& weight_map, const std::string& extra = "") {
  testing::write_bytes(path, "{" + extra + "\"weight_map\": {" + weight_map + "}}");
}

TEST(Checkpoint, OpensSingleFileIndexAndFolder) {
  TempDir dir;
  auto a = at::arange(6, at::kFloat).reshape({2, 3});
  auto b = at::arange(4, at::kInt);
  auto c = at::ones({5}, at::kBFloat16);
  write_safetensors(dir / "m-1.safetensors", {{"a", a}, {"b", b}});
  write_safetensors(dir / "m-2.safetensors", {{"c", c}});
  write_index(dir / "m.safetensors.index.json",
              R"("a": "m-1.safetensors", "b": "m-1.safetensors", "c": "m-2.safetensors")",
              R"("metadata": {"total_size": 50}, )");

  for (const std::string& p : {dir / "m.safetensors.index.json", dir.str()}) {
    SCOPED_TRACE(p);
    Checkpoint ck = Checkpoint::open(p);
    EXPECT_EQ(ck.path(), dir / "m.safetensors.index.json");
    EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ(ck.files().size(), 2u);  // each shard opened once
    EXPECT_TRUE(at::equal(ck.view("a"), a));
    EXPECT_TRUE(at::equal(ck.view("b"), b));
    EXPECT_TRUE(at::equal(ck.view("c"), c));
    EXPECT_EQ(ck.info("c").shape, std::vector<int64_t>{5});
    EXPECT_EQ(ck.find("zz"), nullptr);
    expect_error([&] { ck.info("zz"); }, ErrorKind::kNotFound, {"'zz'", "m.safetensors.index.json"});
  }

  Checkpoint single = Checkpoint::open(dir / "m-2.safetensors");
  EXPECT_EQ(single.names(), std::vector<std::string>{"c"});
}

TEST(Checkpoint, FolderWithoutOrWithSeveralCandidatesIsAnError) {
  TempDir dir;
  expect_error([&] { Checkpoint::open(dir.str()); }, ErrorKind::kNotFound, {dir.str(), "no .safetensors"});
  write_safetensors(dir / "x.safetensors", {{"a", at::zeros({1})}});
  write_safetensors(dir / "y.safetensors", {{"a", at::zeros({1})}});
  expect_error([&] { Checkpoint::open(dir.str()); }, ErrorKind::kInvalidArgument, {"2 .safetensors files"});
}

TEST(Checkpoint, IndexNameMissingFromItsShard) {
  TempDir dir;
  write_safetensors(dir / "s1.safetensors", {{"a", at::zeros({2})}});
  write_safetensors(dir / "s2.safetensors", {{"b", at::zeros({2})}});
  write_index(dir / "i.safetensors.index.json", R"("a": "s1.safetensors", "b": "s1.safetensors")");
  expect_error(
      [&] { Checkpoint::open(dir / "i.safetensors.index.json"); }, ErrorKind::kFormat,
      {"i.safetensors.index.json", "tensor 'b'", "mapped to shard 's1.safetensors'", "no such tensor"});
}

TEST(Checkpoint, TensorPresentTwiceAcrossShards) {
  TempDir dir;
  write_safetensors(dir / "s1.safetensors", {{"a", at::zeros({2})}, {"b", at::zeros({2})}});
  write_safetensors(dir / "s2.safetensors", {{"b", at::zeros({2})}});
  write_index(dir / "i.safetensors.index.json", R"("a": "s1.safetensors", "b": "s2.safetensors")");
  expect_error([&] { Checkpoint::open(dir / "i.safetensors.index.json"); }, ErrorKind::kFormat,
               {"tensor 'b'", "present twice", "s1.safetensors", "s2.safetensors"});
}

TEST(Checkpoint, TensorPresentTwiceInTheIndex) {
  TempDir dir;
  write_safetensors(dir / "s1.safetensors", {{"a", at::zeros({2})}});
  write_index(dir / "i.safetensors.index.json", R"("a": "s1.safetensors", "a": "s1.safetensors")");
  expect_error([&] { Checkpoint::open(dir / "i.safetensors.index.json"); }, ErrorKind::kFormat,
               {"i.safetensors.index.json", "tensor 'a' is present twice"});
}

TEST(Checkpoint, MalformedIndexes) {
  TempDir dir;
  write_safetensors(dir / "s1.safetensors", {{"a", at::zeros({2})}});
  const std::string p = dir / "i.safetensors.index.json";
  testing::write_bytes(p, "{\"weight_map\": ");
  expect_error([&] { Checkpoint::open(p); }, ErrorKind::kFormat, {p, "invalid JSON"});
  testing::write_bytes(p, "[]");
  expect_error([&] { Checkpoint::open(p); }, ErrorKind::kFormat, {p, "not a JSON object"});
  testing::write_bytes(p, "{\"metadata\": {}}");
  expect_error([&] { Checkpoint::open(p); }, ErrorKind::kFormat, {p, "no \"weight_map\""});
  write_index(p, R"("a": 3)");
  expect_error([&] { Checkpoint::open(p); }, ErrorKind::kFormat, {"'a'", "non-string shard"});
  write_index(p, R"("a": "../s1.safetensors")");
  expect_error([&] { Checkpoint::open(p); }, ErrorKind::kFormat,
               {"'a'", "not a file name next to the index"});
  write_index(p, R"("a": "s9.safetensors")");
  expect_error([&] { Checkpoint::open(p); }, ErrorKind::kNotFound, {"s9.safetensors"});
  write_index(p, R"("a": "s1.safetensors")", R"("metadata": {"total_size": -3}, )");
  expect_error([&] { Checkpoint::open(p); }, ErrorKind::kFormat, {"total_size", "non-negative"});
  write_index(p, R"("a": "s1.safetensors")", R"("metadata": {"total_size": 9}, )");
  expect_error([&] { Checkpoint::open(p); }, ErrorKind::kMismatch, {"total_size is 9", "hold 8"});
}

TEST(Checkpoint, ABadShardNamesItsFile) {
  TempDir dir;
  testing::write_bytes(dir / "s1.safetensors", "");
  write_index(dir / "i.safetensors.index.json", R"("a": "s1.safetensors")");
  expect_error([&] { Checkpoint::open(dir / "i.safetensors.index.json"); }, ErrorKind::kFormat,
               {dir / "s1.safetensors", "empty file"});
}

TEST(CheckpointIndex, ReleaseIndexesParse) {
  {
    auto idx = read_checkpoint_index(
        testing::test_data("h3-release/transformer/diffusion_pytorch_model.safetensors.index.json"));
    EXPECT_EQ(idx.weight_map.size(), 638u);
    EXPECT_EQ(idx.shard_files().size(), 14u);
    ASSERT_TRUE(idx.total_size.has_value());
    EXPECT_EQ(*idx.total_size, 66280430080ull);
    EXPECT_EQ(idx.weight_map.count("transformer_blocks.49.attn.to_q.weight"), 1u);
  }
  {
    auto idx = read_checkpoint_index(
        testing::test_data("h3-release/FL2VA/transformer/model.safetensors.index.json"));
    EXPECT_EQ(idx.weight_map.size(), 535u);
    EXPECT_EQ(idx.shard_files().size(), 13u);
    ASSERT_TRUE(idx.total_size.has_value());
    EXPECT_EQ(*idx.total_size, 66280430144ull);
    EXPECT_EQ(idx.weight_map.count("blocks.0.attn.qkv_proj.weight"), 1u);
  }
  {
    auto idx = read_checkpoint_index(
        testing::test_data("h3-release/vae/diffusion_pytorch_model.safetensors.index.json"));
    EXPECT_EQ(idx.weight_map.size(), 703u);
    EXPECT_EQ(idx.shard_files().size(), 3u);
    EXPECT_EQ(*idx.total_size, 10415475936ull);
  }
}

}  // namespace
}  // namespace h3::io
