// The prompt timeline's file (h3/prompt_timeline.h) and the live changes a StreamControl queues
// (h3/progress.h): what is read from a good file, which line a bad one names and why, and
// which prompt the engine takes at a chunk boundary. The causal stage's use of both is in
// causal_engine_test.cpp ("EngineLive").
#include "h3/prompt_timeline.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "../../temp_dir.h"
#include "h3/error.h"
#include "h3/progress.h"

namespace h3 {
namespace {

using ::testing::HasSubstr;

std::vector<std::pair<double, std::string>> entries(const std::vector<TimedPrompt>& t) {
  std::vector<std::pair<double, std::string>> out;
  for (const auto& e : t) out.emplace_back(e.seconds, e.prompt);
  return out;
}

// The error parse_prompt_timeline throws for `text`, or "" when it accepts it.
std::string refusal(const std::string& text) {
  try {
    parse_prompt_timeline(text, "night.txt");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

TEST(PromptTimeline, AGoodFileGivesItsEntriesInOrderWithTheirWholePrompts) {
  const auto t = parse_prompt_timeline(
      "# seconds prompt\n"
      "0 a red circle\n"
      "\n"
      "   # an indented comment\n"
      "1.5\ta blue square moving left  \n"  // a tab after the time; trailing blanks are not the prompt's
      "2.25    a yellow triangle, # not a comment here\n"
      "1e1 ten seconds in\n",
      "night.txt");
  EXPECT_EQ(entries(t),
            (std::vector<std::pair<double, std::string>>{{0.0, "a red circle"},
                                                         {1.5, "a blue square moving left"},
                                                         {2.25, "a yellow triangle, # not a comment here"},
                                                         {10.0, "ten seconds in"}}));
}

TEST(PromptTimeline, CrlfLinesAndAByteOrderMarkReadAsTheSameFile) {
  const std::string unix_text = "# made on Windows\n0.5 a lighthouse\n3 a storm at night\n";
  const auto want = entries(parse_prompt_timeline(unix_text, "a.txt"));
  ASSERT_EQ(want.size(), 2u);
  EXPECT_EQ(
      entries(parse_prompt_timeline("# made on Windows\r\n0.5 a lighthouse\r\n3 a storm at night\r\n", "b")),
      want);
  EXPECT_EQ(entries(parse_prompt_timeline("\xEF\xBB\xBF" + unix_text, "c")), want);
  // No newline after the last line.
  EXPECT_EQ(entries(parse_prompt_timeline("0.5 a lighthouse\n3 a storm at night", "d")), want);
}

TEST(PromptTimeline, ABadLineIsRefusedNamingTheFileTheLineAndWhy) {
  const std::string rule = " (each line: SECONDS PROMPT, times increasing from 0)";
  // Times that do not increase: equal, or going back.
  EXPECT_EQ(refusal("1 a\n# c\n1 b\n"), "night.txt:3: the time 1 does not follow the line before" + rule);
  EXPECT_EQ(refusal("2 a\n1.5 b\n"), "night.txt:2: the time 1.5 does not follow the line before" + rule);
  // Not a time: negative, NaN, infinite, hexadecimal, signed, a word, a decimal comma.
  for (const std::string bad : {"-1", "nan", "NaN", "inf", "-inf", "0x10", "+1", "soon", "1,5", "1e999"}) {
    EXPECT_EQ(refusal("0 a\n" + bad + " b\n"), "night.txt:2: '" + bad + "' is not a time in seconds" + rule);
  }
  // A time without a prompt: nothing after it, only blanks, only a CR.
  for (const std::string bad : {"4", "4   \t", "4\r", "4 \r"}) {
    EXPECT_EQ(refusal("0 a\n\n" + bad + "\n"), "night.txt:3: no prompt after the time" + rule) << bad;
  }
}

TEST(PromptTimeline, AFileWithoutAnyEntryIsRefusedNamingIt) {
  const std::string want =
      "night.txt: the prompt timeline has no entry (only blank lines and # comments); each line: SECONDS "
      "PROMPT, times increasing from 0";
  for (const std::string empty : {"", "\n\n", "# only a comment\n", "  # a\r\n\t\r\n", "\xEF\xBB\xBF"}) {
    EXPECT_EQ(refusal(empty), want) << "'" << empty << "'";
  }
}

TEST(PromptTimeline, TheFileIsReadOrItsAbsenceNamed) {
  const test::TempDir dir("timeline");
  const std::string good = dir / "good.txt", empty = dir / "empty.txt";
  std::ofstream(good) << "0.7 a green field\n";
  std::ofstream(empty) << "";
  EXPECT_EQ(entries(read_prompt_timeline(good)),
            (std::vector<std::pair<double, std::string>>{{0.7, "a green field"}}));
  try {
    read_prompt_timeline(empty);
    ADD_FAILURE() << "an empty file was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr(empty + ": the prompt timeline has no entry"));
  }
  const std::string missing = dir / "missing.txt";
  try {
    read_prompt_timeline(missing);
    ADD_FAILURE() << "a missing file was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_EQ(std::string(e.what()), "prompt timeline " + missing + " cannot be read");
  }
}

// ---- StreamControl's live prompt changes ----

TEST(CancelTokenPrompts, TakePromptGivesTheLatestDueChangeAndKeepsTheLaterOnes) {
  StreamControl t;
  EXPECT_EQ(t.take_prompt(100), std::nullopt);
  t.change_prompt("at two", 2.0);
  t.change_prompt("next chunk");  // 0: due at once
  t.change_prompt("at five", 5.0);
  t.change_prompt("at one", 1.0);
  // Due by 1.5 s: "next chunk" (0) and "at one" (1.0); the later due wins, both are gone.
  EXPECT_EQ(t.take_prompt(1.5), std::optional<std::string>("at one"));
  EXPECT_EQ(t.take_prompt(1.5), std::nullopt);
  // Exactly at its time (within a nanosecond's rounding of c * 17 / 24).
  EXPECT_EQ(t.take_prompt(2.0 - 1e-12), std::optional<std::string>("at two"));
  EXPECT_EQ(t.take_prompt(4.99), std::nullopt);
  EXPECT_EQ(t.take_prompt(5.0), std::optional<std::string>("at five"));
  EXPECT_EQ(t.take_prompt(1e9), std::nullopt);
}

TEST(CancelTokenPrompts, OfChangesDueAtOneTimeTheLastGivenWinsAndEmptyOnesAreIgnored) {
  StreamControl t;
  t.change_prompt("first", 3.0);
  t.change_prompt("second", 3.0);
  t.change_prompt("", 3.0);  // ignored: not a prompt
  t.change_prompt("");
  EXPECT_EQ(t.take_prompt(3.0), std::optional<std::string>("second"));
  EXPECT_EQ(t.take_prompt(3.0), std::nullopt);
}

TEST(CancelTokenPrompts, ResetDropsQueuedChangesWithTheCancelAndTheFinish) {
  StreamControl t;
  t.change_prompt("pending", 1.0);
  t.cancel();
  t.finish();
  ASSERT_TRUE(t.requested());
  ASSERT_TRUE(t.finish_requested());
  t.reset();
  EXPECT_FALSE(t.requested());
  EXPECT_FALSE(t.finish_requested());
  EXPECT_EQ(t.take_prompt(10), std::nullopt);
}

}  // namespace
}  // namespace h3
