#include <ATen/ATen.h>

#include <fstream>
#include <iterator>

#include "../text/text_test_util.h"
#include "tools/y4m_writer.h"

namespace h3 {
namespace {

TEST(Y4m, Bt601LimitedRangeOfKnownColours) {
  const at::Tensor rgb =
      at::tensor({0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 255, 0, 0, 0, 255}, at::kByte).view({1, 1, 5, 3});
  const at::Tensor yuv = Y4mWriter::rgb_to_yuv444(rgb);  // [1, 3, 1, 5]
  const std::vector<std::vector<int>> want{
      {16, 128, 128}, {235, 128, 128}, {81, 90, 240}, {145, 54, 34}, {41, 240, 110}};
  for (int i = 0; i < 5; ++i) {
    for (int c = 0; c < 3; ++c)
      EXPECT_EQ(yuv[0][c][0][i].item<int>(), want[i][c]) << "colour " << i << " plane " << c;
  }
}

TEST(Y4m, WritesAHeaderAndOneFramePerPicture) {
  test::TempDir dir("y4m");
  {
    Y4mWriter w(dir / "a.y4m", 5, 3, 24, 1);
    w.write(at::zeros({2, 3, 5, 3}, at::kByte));
    w.write(at::full({1, 3, 5, 3}, 255, at::kByte));
    EXPECT_EQ(w.frames_written(), 3);
    w.close();
  }
  std::ifstream in(dir / "a.y4m", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string header = "YUV4MPEG2 W5 H3 F24:1 Ip A1:1 C444\n";
  ASSERT_EQ(bytes.size(), header.size() + 3 * (6 + 3 * 5 * 3));
  EXPECT_EQ(bytes.substr(0, header.size()), header);
  EXPECT_EQ(bytes.substr(header.size(), 6), "FRAME\n");
  EXPECT_EQ(static_cast<unsigned char>(bytes[header.size() + 6]), 16);          // black Y
  EXPECT_EQ(static_cast<unsigned char>(bytes[bytes.size() - 1]), 128);          // white Cr
  EXPECT_EQ(static_cast<unsigned char>(bytes[bytes.size() - 3 * 5 * 3]), 235);  // white Y
}

TEST(Y4m, WrongFramesAndUnwritablePathsAreErrors) {
  test::TempDir dir("y4m");
  Y4mWriter w(dir / "a.y4m", 5, 3, 24, 1);
  test::expect_error(
      [&] {
        w.write(at::zeros({1, 5, 3, 3}, at::kByte));
      },
      ErrorKind::kInvalidArgument, {"[n, 3, 5, 3]"});
  test::expect_error([&] { Y4mWriter(dir / "no/such/dir/a.y4m", 5, 3, 24, 1); }, ErrorKind::kNotFound,
                     {"no/such/dir/a.y4m"});
}

}  // namespace
}  // namespace h3
