#include "text/byte_encoder.h"

#include <ATen/ATen.h>

#include "io/safetensors.h"
#include "text_test_util.h"

namespace h3::text {
namespace {

using test::expect_error;
using test::TempDir;

TEST(ByteEncoder, PromptBytesSelectTableRowsAfterTheStartRow) {
  const ByteEncoder enc(ByteEncoder::random_table(16, 3));
  const Conditioning c = enc.encode("ab\xc3\xa9");  // "abé": 4 UTF-8 bytes
  ASSERT_EQ(c.embeds.sizes(), (std::vector<int64_t>{5, 16}));
  EXPECT_FALSE(c.tags.defined());
  EXPECT_TRUE(at::equal(c.embeds[0], enc.table()[ByteEncoder::kStartRow]));
  EXPECT_TRUE(at::equal(c.embeds[1], enc.table()['a']));
  EXPECT_TRUE(at::equal(c.embeds[3], enc.table()[0xc3]));
  EXPECT_EQ(enc.encode("").embeds.size(0), 1);
}

TEST(ByteEncoder, SamePromptSameRowsOtherPromptOtherRows) {
  const ByteEncoder enc(ByteEncoder::random_table(16, 3));
  EXPECT_TRUE(at::equal(enc.encode("a red fox").embeds, enc.encode("a red fox").embeds));
  EXPECT_FALSE(at::equal(enc.encode("a red fox").embeds, enc.encode("a red box").embeds));
  EXPECT_TRUE(at::equal(ByteEncoder::random_table(16, 3), ByteEncoder::random_table(16, 3)));
  EXPECT_FALSE(at::equal(ByteEncoder::random_table(16, 3), ByteEncoder::random_table(16, 4)));
}

TEST(ByteEncoder, WritesAndLoadsItsFolder) {
  TempDir dir("bytes");
  const at::Tensor table = ByteEncoder::random_table(8, 1);
  ByteEncoder::write(dir / "text_encoder", table);
  EXPECT_TRUE(ByteEncoder::declared_in(dir / "text_encoder"));
  EXPECT_FALSE(ByteEncoder::declared_in(dir.str()));
  const ByteEncoder back = ByteEncoder::load(dir / "text_encoder");
  EXPECT_TRUE(at::equal(back.table(), table));
  EXPECT_EQ(back.text_dim(), 8);
}

TEST(ByteEncoder, ErrorsNameWhatToFix) {
  TempDir dir("bytes");
  ByteEncoder::write(dir / "te", ByteEncoder::random_table(8, 1));
  io::write_safetensors(dir / "te/model.safetensors", {{ByteEncoder::kTableName, at::zeros({257, 4})}});
  expect_error([&] { ByteEncoder::load(dir / "te"); }, ErrorKind::kMismatch,
               {"model.safetensors", "text_dim 8"});
  expect_error([&] { ByteEncoder::load(dir / "none"); }, ErrorKind::kNotFound, {"config.json"});
  const ByteEncoder enc(ByteEncoder::random_table(8, 1));
  expect_error([&] { enc.encode(std::string(ByteEncoder::kMaxBytes + 1, 'x')); }, ErrorKind::kInvalidArgument,
               {"prompt", "4096"});
}

}  // namespace
}  // namespace h3::text
