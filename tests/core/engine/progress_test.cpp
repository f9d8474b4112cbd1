// The command line's progress display: plain lines for logs and pipes, a redrawn bar on a terminal.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "tools/progress_bar.h"

namespace h3::tools {
namespace {

std::string render(int tty) {
  std::FILE* f = std::tmpfile();
  {
    ProgressPrinter p(tty, f);
    p(Progress{Phase::kLoading, 1, 2, 0, 0, 0, 0, 0.5});
    p(Progress{Phase::kDenoising, 3, 7, 0, 3, 0, 48, 1.25});
    p(Progress{Phase::kDecoding, 7, 7, 2, 3, 34, 48, 2.0});
    p(Progress{Phase::kDone, 7, 7, 3, 3, 48, 48, 3.0});
    p.finish();
  }
  std::rewind(f);
  std::string s;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

TEST(ProgressPrinter, PlainLinesWhenNotATerminal) {
  const std::string s = render(0);
  EXPECT_EQ(s,
            "h3: loading 1/2 parts (0.50 s)\n"
            "h3: denoising 3/7 steps (1.25 s)\n"
            "h3: decoding 2/3 chunks, 34/48 frames (2.00 s)\n"
            "h3: done 48/48 frames (3.00 s)\n");
}

TEST(ProgressPrinter, ABarRedrawnInPlaceOnATerminal) {
  const std::string s = render(1);
  EXPECT_THAT(s, ::testing::HasSubstr("\r\033[Kdenoising    [############------------------] 3/7 steps"));
  EXPECT_THAT(s, ::testing::HasSubstr("[##############################] 48/48 frames"));
  EXPECT_EQ(s.back(), '\n');
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 1);  // one line for the whole request
}

// A causal request's prompt change: no total to count against, the chunk it applies from.
TEST(ProgressPrinter, APromptChangeNamesTheChunkItAppliesFrom) {
  for (const int tty : {0, 1}) {
    std::FILE* f = std::tmpfile();
    {
      ProgressPrinter p(tty, f);
      p(Progress{Phase::kPrompt, 0, 0, 3, -1, 51, -1, 2.5});
      p.finish();
    }
    std::rewind(f);
    char buf[256] = "";
    const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    const std::string s(buf, n);
    if (tty == 0) {
      EXPECT_EQ(s, "h3: prompt from chunk 3 (2.50 s)\n");
    } else {
      EXPECT_THAT(s, ::testing::HasSubstr("] from chunk 3 2.5s"));
    }
  }
}

}  // namespace
}  // namespace h3::tools
