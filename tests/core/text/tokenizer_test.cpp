// The H3 tokenizer against the reference tokenizer's ids (tests/data/golden/h3_text), and its
// errors on bad input.
#include "text/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "golden_encoder.h"
#include "text/pretokenize.h"
#include "text_test_util.h"

namespace h3::text {
namespace {
namespace fs = std::filesystem;
using ::testing::ElementsAreArray;

const Tokenizer& shipped() {
  static const Tokenizer t = Tokenizer::load(test::shipped_tokenizer_dir());
  return t;
}

std::string from_hex(const std::string& hex) {
  std::string s;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    s += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return s;
}

nlohmann::json cases() {
  std::ifstream in(test::text_golden_dir() + "/tokenizer_cases.json");
  return nlohmann::json::parse(in);
}

TEST(Tokenizer, VocabularyAndAddedTokensAsReleased) {
  const auto facts = cases()["facts"];
  const Tokenizer& t = shipped();
  EXPECT_EQ(t.base_vocab_size(), facts["base_vocab"].get<int64_t>());
  EXPECT_EQ(t.vocab_size(), facts["len_with_added"].get<int64_t>());
  EXPECT_EQ(t.merges(), facts["merges"].get<size_t>());
  ASSERT_EQ(t.added_tokens().size(), facts["added_tokens"].size());
  for (const auto& [content, id] : facts["added_tokens"].items()) {
    EXPECT_EQ(t.id_of(content), id.get<int64_t>()) << content;
  }
  // H3's seven tokens come after the 26 of added_tokens_decoder, in list order.
  EXPECT_EQ(t.id_of("<d>"), 151669);
  EXPECT_EQ(t.id_of("<|caption_end|>"), 151675);
}

TEST(Tokenizer, GoldenPromptIds) {
  const auto c = cases();
  ASSERT_EQ(c["prompts"].size(), 40u);
  for (const auto& p : c["prompts"]) {
    const std::string text = from_hex(p["text_utf8_hex"].get<std::string>());
    ASSERT_EQ(text, p["text"].get<std::string>()) << p["name"];
    const auto want = p["ids"].get<std::vector<int64_t>>();
    EXPECT_THAT(shipped().encode(text), ElementsAreArray(want)) << p["name"] << ": " << p["what"];
  }
}

TEST(Tokenizer, ByteLevelMap) {
  EXPECT_EQ(byte_level_char(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(byte_level_char('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(byte_level_char('A'), "A");
  EXPECT_EQ(byte_level_char(0xAD), "\xC5\x83");  // the soft hyphen is the last of the 68: U+0143
}

TEST(PreTokenizer, PiecesConcatenateBack) {
  const PreTokenizer pre;
  const std::string text = "I'm  here\n\n  at 12:30 — ok?! ";
  std::string back;
  std::vector<std::string> got;
  for (auto p : pre.split(text)) {
    back += p;
    got.emplace_back(p);
  }
  EXPECT_EQ(back, text);
  EXPECT_THAT(got,
              ElementsAreArray(std::vector<std::string>{"I", "'m", " ", " here", "\n\n", " ", " at", " ", "1",
                                                        "2", ":", "3", "0", " —", " ok", "?!", " "}));
}

TEST(Tokenizer, EmptyPromptHasNoIds) {
  EXPECT_TRUE(shipped().encode("").empty());
}

TEST(Tokenizer, LongPromptTokenizesLikeItsParts) {
  // 20,000 characters: the sentence's ids repeated (every copy starts with a space and ends with
  // a full stop, so no piece spans two copies), then a tail of letters.
  const std::string unit = " A red kite over the dunes at dusk.";
  std::string text;
  while (text.size() + unit.size() <= 20000) text += unit;
  const size_t copies = text.size() / unit.size();
  text.resize(20000, 'x');
  const auto ids = shipped().encode(text);
  const auto unit_ids = shipped().encode(unit);
  ASSERT_GT(ids.size(), (copies - 1) * unit_ids.size());
  for (size_t c = 0; c + 1 < copies; ++c) {
    for (size_t k = 0; k < unit_ids.size(); ++k) ASSERT_EQ(ids[c * unit_ids.size() + k], unit_ids[k]) << c;
  }
  // A long run of one character is merged without quadratic work.
  EXPECT_FALSE(shipped().encode(std::string(20000, ' ')).empty());
}

TEST(Tokenizer, InvalidUtf8NamesTheByteOffset) {
  test::expect_error([] { shipped().encode(std::string("caf\xC3\xA9 \xFF tail")); },
                     ErrorKind::kInvalidArgument, {"invalid UTF-8", "byte offset 6", "0xFF"});
  // A truncated sequence at the end, an overlong '/', and an encoded surrogate.
  test::expect_error([] { shipped().encode(std::string("ab\xE2\x82")); }, ErrorKind::kInvalidArgument,
                     {"byte offset 2"});
  test::expect_error([] { shipped().encode(std::string("\xC0\xAF")); }, ErrorKind::kInvalidArgument,
                     {"byte offset 0"});
  test::expect_error([] { shipped().encode(std::string("x\xED\xA0\x80")); }, ErrorKind::kInvalidArgument,
                     {"byte offset 1"});
  test::expect_error([] { shipped().encode(std::string("\xFF"), "prompt file p.txt"); },
                     ErrorKind::kInvalidArgument, {"prompt file p.txt"});
}

TEST(Tokenizer, OverlongPromptIsRefusedAndOneAtTheLimitEncodes) {
  // Exactly at the limit: encoded.
  EXPECT_FALSE(shipped().encode(std::string(Tokenizer::kMaxPromptBytes, 'a')).empty());
  for (size_t over : {size_t(1), size_t(2), Tokenizer::kMaxPromptBytes}) {
    test::expect_error([&] { shipped().encode(std::string(Tokenizer::kMaxPromptBytes + over, 'a')); },
                       ErrorKind::kInvalidArgument,
                       {"limit", std::to_string(Tokenizer::kMaxPromptBytes), "shorten"});
  }
}

TEST(Tokenizer, FolderMissingAFileNamesIt) {
  for (const char* missing : {Tokenizer::kVocabFile, Tokenizer::kMergesFile, Tokenizer::kConfigFile}) {
    test::TempDir dir("tok");
    for (const char* f : {Tokenizer::kVocabFile, Tokenizer::kMergesFile, Tokenizer::kConfigFile}) {
      if (std::string(f) != missing)
        fs::copy_file(fs::path(test::shipped_tokenizer_dir()) / f, fs::path(dir.str()) / f);
    }
    test::expect_error([&] { Tokenizer::load(dir.str()); }, ErrorKind::kNotFound, {dir / missing, "missing"});
  }
  test::expect_error([] { Tokenizer::load("/nonexistent/tokenizer"); }, ErrorKind::kNotFound,
                     {"/nonexistent/tokenizer", "vocab.json"});
}

TEST(Tokenizer, MalformedFilesNameFileAndLine) {
  test::TempDir dir("tok");
  for (const char* f : {Tokenizer::kVocabFile, Tokenizer::kConfigFile})
    fs::copy_file(fs::path(test::shipped_tokenizer_dir()) / f, fs::path(dir.str()) / f);
  {
    std::ofstream m(dir / Tokenizer::kMergesFile);
    m << "\xC4\xA0 \xC4\xA0\ni n\nnot-a-merge\n";
  }
  test::expect_error([&] { Tokenizer::load(dir.str()); }, ErrorKind::kFormat,
                     {dir / Tokenizer::kMergesFile + ":3", "two tokens"});
  {
    std::ofstream v(dir / Tokenizer::kVocabFile);
    v << "{\"a\": 0,";
  }
  test::expect_error([&] { Tokenizer::load(dir.str()); }, ErrorKind::kFormat,
                     {dir / Tokenizer::kVocabFile, "JSON"});
}

// vocab.json is read as a stream (no document): each way an entry can be wrong still names the file
// and the token.
TEST(Tokenizer, MalformedVocabularyNamesTheToken) {
  test::TempDir dir("tok");
  for (const char* f : {Tokenizer::kMergesFile, Tokenizer::kConfigFile})
    fs::copy_file(fs::path(test::shipped_tokenizer_dir()) / f, fs::path(dir.str()) / f);
  const struct {
    const char* vocab;
    const char* says[2];
  } cases[] = {
      {"[1, 2]", {"must be a", "non-empty object"}},
      {"{}", {"must be a", "non-empty object"}},
      {"{\"a\": 0, \"b\": -1}", {"'b'", "non-negative integer"}},
      {"{\"a\": 0, \"b\": 1.5}", {"'b'", "non-negative integer"}},
      {"{\"a\": 0, \"b\": \"1\"}", {"'b'", "non-negative integer"}},
      {"{\"a\": 0, \"b\": {\"c\": 1}}", {"'b'", "non-negative integer"}},
      {"{\"a\": 0, \"b\": 4294967296}", {"'b'", "non-negative integer"}},
      {"{\"a\": 0, \"a\": 1}", {"'a'", "appears twice"}},
      {"{\"a\": 0, \"b\": 2}", {"'b'", "0..1"}},
      {"{\"a\": 1, \"b\": 1}", {"0..1", "repeats"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.vocab);
    {
      std::ofstream v(dir / Tokenizer::kVocabFile);
      v << c.vocab;
    }
    test::expect_error([&] { Tokenizer::load(dir.str()); }, ErrorKind::kFormat,
                       {dir / Tokenizer::kVocabFile, c.says[0], c.says[1]});
  }
}

// A merge of tokens the vocabulary lacks names the line; a merges.txt without a final newline and
// with CRLF line ends reads like the release's.
TEST(Tokenizer, MergesNameTheLineAndTakeAnyLineEnd) {
  test::TempDir dir("tok");
  for (const char* f : {Tokenizer::kVocabFile, Tokenizer::kConfigFile})
    fs::copy_file(fs::path(test::shipped_tokenizer_dir()) / f, fs::path(dir.str()) / f);
  {
    std::ofstream m(dir / Tokenizer::kMergesFile, std::ios::binary);
    m << "#version: 0.2\r\ni n\r\nzzzz qqqq";
  }
  test::expect_error([&] { Tokenizer::load(dir.str()); }, ErrorKind::kFormat,
                     {dir / Tokenizer::kMergesFile + ":3", "'zzzz qqqq'", "does not hold"});
  {
    std::ofstream m(dir / Tokenizer::kMergesFile, std::ios::binary);
    m << "#version: 0.2\r\ni n\r\nt h";
  }
  const Tokenizer t = Tokenizer::load(dir.str());
  EXPECT_EQ(t.merges(), 2u);
  EXPECT_EQ(t.encode("in"), std::vector<int64_t>{t.id_of("in")});
  EXPECT_EQ(t.encode("th"), std::vector<int64_t>{t.id_of("th")});
  EXPECT_EQ(t.encode("it"), (std::vector<int64_t>{t.id_of("i"), t.id_of("t")}));
}

}  // namespace
}  // namespace h3::text
