#include "tools/args.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using h3::tools::Args;
using h3::tools::UsageError;

TEST(Args, ReadsValuesFlagsAndPositionals) {
  Args a("decode", {"in.safetensors", "--ranks", "2", "--out=x.st", "--no-tiling"});
  EXPECT_EQ(a.int_or("ranks", 1, 1, 64), 2);
  EXPECT_EQ(a.string("out"), "x.st");
  EXPECT_TRUE(a.flag("no-tiling"));
  EXPECT_FALSE(a.flag("verbose"));
  ASSERT_EQ(a.positional().size(), 1u);
  EXPECT_EQ(a.positional()[0], "in.safetensors");
  EXPECT_NO_THROW(a.finish());
}

TEST(Args, ARepeatableOptionGivesEveryValueInOrder) {
  Args a("generate", {"--reference", "a.png", "--out", "x.y4m", "--reference=b.png", "--reference", "c.png"});
  EXPECT_EQ(a.strings("reference"), (std::vector<std::string>{"a.png", "b.png", "c.png"}));
  EXPECT_EQ(a.string("out"), "x.y4m");
  EXPECT_TRUE(a.strings("absent").empty());
  EXPECT_NO_THROW(a.finish());
  Args bare("generate", {"--reference"});
  EXPECT_THROW(bare.strings("reference"), UsageError);
}

TEST(Args, RejectsUnknownRepeatedMissingAndOutOfRange) {
  Args unknown("decode", {"--rank", "2"});
  (void)unknown.int_or("ranks", 1, 1, 64);
  EXPECT_THROW(unknown.finish(), UsageError);
  Args twice("decode", {"--out", "a", "--out", "b"});
  EXPECT_THROW(twice.string("out"), UsageError);  // a one-value option given twice
  Args missing("decode", {});
  EXPECT_THROW(missing.string("out"), UsageError);
  Args range("decode", {"--ranks", "0"});
  EXPECT_THROW(range.int_or("ranks", 1, 1, 64), UsageError);
  Args notint("decode", {"--ranks", "two"});
  EXPECT_THROW(notint.int_or("ranks", 1, 1, 64), UsageError);
}
