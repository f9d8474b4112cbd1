#include "text/conditioning.h"

#include <ATen/ATen.h>

#include "io/safetensors.h"
#include "text_test_util.h"

namespace h3::text {
namespace {

using test::expect_error;
using test::TempDir;

TEST(Embeddings, LoadsBf16AndFp32AsFp32WithTags) {
  TempDir dir("text");
  const at::Tensor e = at::randn({5, 8});
  const at::Tensor tags = at::tensor({1, 1, 0, 0, 1}, at::kInt);
  io::write_safetensors(dir / "a.safetensors", {{"embeds", e.to(at::kBFloat16)}, {"tags", tags}});
  io::write_safetensors(dir / "b.safetensors", {{"embeds", e}});
  const Conditioning a = load_embeddings(dir / "a.safetensors", 8);
  EXPECT_EQ(a.embeds.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(a.embeds, e.to(at::kBFloat16).to(at::kFloat)));
  ASSERT_TRUE(a.tags.defined());
  EXPECT_EQ(a.tags.scalar_type(), at::kLong);
  EXPECT_TRUE(at::equal(a.tags, tags.to(at::kLong)));
  const Conditioning b = load_embeddings(dir / "b.safetensors", 8);
  EXPECT_TRUE(at::equal(b.embeds, e));
  EXPECT_FALSE(b.tags.defined());
}

TEST(Embeddings, WrongWidthNamesTheFileAndTextDim) {
  TempDir dir("text");
  io::write_safetensors(dir / "e.safetensors", {{"embeds", at::zeros({3, 16})}});
  expect_error([&] { load_embeddings(dir / "e.safetensors", 64); }, ErrorKind::kMismatch,
               {"e.safetensors", "[3, 16]", "64", "text_dim"});
}

TEST(Embeddings, BadFilesAreClearErrors) {
  TempDir dir("text");
  expect_error([&] { load_embeddings(dir / "missing.safetensors", 8); }, ErrorKind::kNotFound,
               {"missing.safetensors", "embeds"});
  io::write_safetensors(dir / "noembeds.safetensors", {{"x", at::zeros({3, 8})}});
  expect_error([&] { load_embeddings(dir / "noembeds.safetensors", 8); }, ErrorKind::kFormat,
               {"noembeds.safetensors", "`embeds`"});
  io::write_safetensors(dir / "rank3.safetensors", {{"embeds", at::zeros({1, 3, 8})}});
  expect_error([&] { load_embeddings(dir / "rank3.safetensors", 8); }, ErrorKind::kFormat, {"[L, 8]"});
  io::write_safetensors(dir / "empty.safetensors", {{"embeds", at::zeros({0, 8})}});
  expect_error([&] { load_embeddings(dir / "empty.safetensors", 8); }, ErrorKind::kFormat, {"L >= 1"});
  io::write_safetensors(dir / "ints.safetensors", {{"embeds", at::zeros({2, 8}, at::kInt)}});
  expect_error([&] { load_embeddings(dir / "ints.safetensors", 8); }, ErrorKind::kFormat, {"bf16"});
  io::write_safetensors(dir / "tags.safetensors",
                        {{"embeds", at::zeros({2, 8})}, {"tags", at::zeros({3}, at::kLong)}});
  expect_error([&] { load_embeddings(dir / "tags.safetensors", 8); }, ErrorKind::kFormat, {"`tags`", "[2]"});
  io::write_safetensors(dir / "tagval.safetensors",
                        {{"embeds", at::zeros({2, 8})}, {"tags", at::tensor({1, 2}, at::kLong)}});
  expect_error([&] { load_embeddings(dir / "tagval.safetensors", 8); }, ErrorKind::kFormat,
               {"`tags`", "found 1..2"});
}

TEST(Embeddings, GoldenRunEmbeddingsLoad) {
  const char* data = std::getenv("H3_TEST_DATA");
  ASSERT_NE(data, nullptr);
  const Conditioning c =
      load_embeddings(std::string(data) + "/golden/h3_dit/gen_tiny_124f_96x64_n4.embeds.safetensors", 64);
  EXPECT_EQ(c.embeds.sizes(), (std::vector<int64_t>{7, 64}));
}

}  // namespace
}  // namespace h3::text
