#include "text/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <string_view>

#include "h3/error.h"
#include "text/unicode.h"

namespace h3::text {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary | std::ios::ate);
  if (!in) {
    throw Error(ErrorKind::kNotFound, p.string() +
                                          ": missing: a tokenizer folder needs vocab.json, merges.txt and "
                                          "tokenizer_config.json (the release's tokenizer/ folder)");
  }
  std::string bytes(static_cast<size_t>(in.tellg()), '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
    throw Error(ErrorKind::kNotFound, p.string() + ": could not be read");
  }
  return bytes;
}

json parse_json(const fs::path& p) {
  try {
    return json::parse(read_file(p));
  } catch (const json::exception& e) {
    throw Error(ErrorKind::kFormat, p.string() + ": not valid JSON: " + e.what());
  }
}

// vocab.json read as a stream of events straight into the token -> id map. Building the document
// first (a std::map of the release's 151 k entries) took as long as everything else in loading the
// tokenizer; it is on every cold start's way to the first frame. Stops at the first entry that is
// not a token with a non-negative id, naming it; the ids' range is checked once all are known.
class VocabReader : public nlohmann::json_sax<json> {
 public:
  VocabReader(const fs::path& path, std::unordered_map<std::string, int32_t>* vocab)
      : path_(path), vocab_(vocab) {}

  const std::string& error() const { return error_; }

  bool start_object(std::size_t) override {
    if (depth_++ == 0) return true;
    return refuse_value();
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool key(string_t& token) override {
    token_ = std::move(token);
    return true;
  }
  bool number_unsigned(number_unsigned_t id) override {
    if (depth_ != 1 || id > static_cast<number_unsigned_t>(std::numeric_limits<int32_t>::max()))
      return refuse_value();
    // try_emplace leaves the token in place when it is there already, for the message.
    if (vocab_->try_emplace(std::move(token_), static_cast<int32_t>(id)).second) return true;
    return fail("token '" + token_ + "' appears twice");
  }
  bool number_integer(number_integer_t) override { return refuse_value(); }
  bool number_float(number_float_t, const string_t&) override { return refuse_value(); }
  bool string(string_t&) override { return refuse_value(); }
  bool binary(binary_t&) override { return refuse_value(); }
  bool boolean(bool) override { return refuse_value(); }
  bool null() override { return refuse_value(); }
  bool start_array(std::size_t) override { return refuse_value(); }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    return fail(std::string("not valid JSON: ") + e.what());
  }

 private:
  bool refuse_value() {
    return fail(depth_ == 0 ? std::string("must be a non-empty object of token -> id")
                            : "token '" + token_ + "' has an id that is not a non-negative integer");
  }
  bool fail(const std::string& why) {
    if (error_.empty()) error_ = path_.string() + ": " + why;
    return false;
  }

  const fs::path& path_;
  std::unordered_map<std::string, int32_t>* vocab_;
  std::string token_, error_;
  int depth_ = 0;
};

std::string utf8_of(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {  // the byte map stays below U+0800
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace

std::string byte_level_char(uint8_t b) {
  auto printable = [](int v) { return (v >= 0x21 && v <= 0x7E) || (v >= 0xA1 && v <= 0xAC) || v >= 0xAE; };
  if (printable(b)) return utf8_of(b);
  uint32_t n = 0;  // the other bytes take U+0100, U+0101, ... in byte order
  for (int v = 0; v < b; ++v) n += printable(v) ? 0 : 1;
  return utf8_of(256 + n);
}

Tokenizer Tokenizer::load(const std::string& dir) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) {
    throw Error(
        ErrorKind::kNotFound,
        dir + ": no such tokenizer folder (expected vocab.json, merges.txt and tokenizer_config.json)");
  }
  Tokenizer t;
  // vocab.json: byte-level token string -> id, ids 0..N-1.
  const fs::path vocab_path = root / kVocabFile;
  {
    const std::string text = read_file(vocab_path);
    t.vocab_.reserve(text.size() / 8);  // about 10 bytes an entry in the release's file
    VocabReader reader(vocab_path, &t.vocab_);
    if (!json::sax_parse(text, &reader)) throw Error(ErrorKind::kFormat, reader.error());
  }
  if (t.vocab_.empty()) {
    throw Error(ErrorKind::kFormat, vocab_path.string() + ": must be a non-empty object of token -> id");
  }
  std::vector<bool> seen(t.vocab_.size(), false);
  for (const auto& [token, id] : t.vocab_) {
    if (static_cast<size_t>(id) >= seen.size() || seen[id]) {
      throw Error(ErrorKind::kFormat, vocab_path.string() + ": token '" + token +
                                          "' has an id that is not one of 0.." +
                                          std::to_string(seen.size() - 1) + " or repeats another's");
    }
    seen[id] = true;
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = t.vocab_.find(byte_level_char(static_cast<uint8_t>(b)));
    if (it == t.vocab_.end()) {
      throw Error(ErrorKind::kFormat, vocab_path.string() + ": no token for byte " + std::to_string(b) +
                                          ": not a byte-level BPE vocabulary");
    }
    t.byte_id_[b] = it->second;
  }

  // merges.txt: "left right" per line, rank = line order (an optional "#version" first line).
  const fs::path merges_path = root / kMergesFile;
  const std::string merges = read_file(merges_path);
  t.merge_.reserve(static_cast<size_t>(std::count(merges.begin(), merges.end(), '\n')) + 1);
  std::string left, right, both;  // reused: one allocation for the file, not three a line
  size_t line_no = 0;
  for (size_t pos = 0; pos < merges.size();) {
    const size_t end = std::min(merges.find('\n', pos), merges.size());
    std::string_view line(merges.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    if (sp == 0 || sp == std::string_view::npos || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string_view::npos) {
      throw Error(ErrorKind::kFormat, merges_path.string() + ":" + std::to_string(line_no) +
                                          ": a merge must be two tokens separated by one space");
    }
    left.assign(line.substr(0, sp));
    right.assign(line.substr(sp + 1));
    both.assign(left).append(right);
    const auto l = t.vocab_.find(left), r = t.vocab_.find(right), m = t.vocab_.find(both);
    if (l == t.vocab_.end() || r == t.vocab_.end() || m == t.vocab_.end()) {
      throw Error(ErrorKind::kFormat, merges_path.string() + ":" + std::to_string(line_no) + ": '" +
                                          std::string(line) +
                                          "' names a token that vocab.json does not hold");
    }
    const uint64_t key = (uint64_t(uint32_t(l->second)) << 32) | uint32_t(r->second);
    t.merge_.emplace(key, Merge{static_cast<int32_t>(t.merge_count_), m->second});  // first rank wins
    ++t.merge_count_;
  }

  // tokenizer_config.json: the added tokens by id, then additional special tokens not among them,
  // numbered on in list order (H3's <d>, </d>, <|cutoff|>, ...).
  const fs::path config_path = root / kConfigFile;
  const json config = parse_json(config_path);
  if (!config.is_object()) throw Error(ErrorKind::kFormat, config_path.string() + ": must be a JSON object");
  std::map<int64_t, std::string> added;
  auto known = [&](const std::string& content) {
    for (const auto& [id, c] : added)
      if (c == content) return true;
    return false;
  };
  if (config.contains("added_tokens_decoder")) {
    const json& d = config["added_tokens_decoder"];
    if (!d.is_object())
      throw Error(ErrorKind::kFormat, config_path.string() + ": added_tokens_decoder must be an object");
    for (const auto& [key, entry] : d.items()) {
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(key, &used);
        if (used != key.size()) id = -1;
      } catch (const std::exception&) {
      }
      if (id < t.base_vocab_size() || !entry.is_object() || !entry.contains("content") ||
          !entry["content"].is_string() || entry["content"].get<std::string>().empty()) {
        throw Error(ErrorKind::kFormat, config_path.string() + ": added_tokens_decoder[\"" + key +
                                            "\"] must have an id at or above the base vocabulary (" +
                                            std::to_string(t.base_vocab_size()) +
                                            ") and a non-empty content");
      }
      added.emplace(id, entry["content"].get<std::string>());
    }
  }
  int64_t next =
      added.empty() ? t.base_vocab_size() : std::max(t.base_vocab_size(), added.rbegin()->first + 1);
  if (config.contains("additional_special_tokens")) {
    const json& a = config["additional_special_tokens"];
    if (!a.is_array())
      throw Error(ErrorKind::kFormat, config_path.string() + ": additional_special_tokens must be a list");
    for (const json& e : a) {
      const json* c = e.is_object() && e.contains("content") ? &e["content"] : &e;
      if (!c->is_string() || c->get<std::string>().empty()) {
        throw Error(
            ErrorKind::kFormat,
            config_path.string() + ": additional_special_tokens holds an entry that is not a token string");
      }
      if (!known(c->get<std::string>())) added.emplace(next++, c->get<std::string>());
    }
  }
  for (const auto& [id, content] : added) {
    check_utf8(content, config_path.string() + ": added token");
    t.added_.emplace_back(content, id);
  }
  t.pre_ = std::make_shared<PreTokenizer>();
  return t;
}

int64_t Tokenizer::id_of(const std::string& token) const {
  for (const auto& [content, id] : added_)
    if (content == token) return id;
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

void Tokenizer::bpe(const std::string& piece, std::vector<int64_t>& out) const {
  const int n = static_cast<int>(piece.size());
  if (n == 1) {
    out.push_back(byte_id_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  // Symbols as a linked list over the piece's bytes; candidate pairs in a heap ordered by rank,
  // then position (the leftmost of equal merges goes first). A popped pair whose symbols have
  // changed since it was pushed is stale and skipped. O(n log n) even for long runs.
  std::vector<int32_t> id(n), prev(n), nxt(n);
  for (int i = 0; i < n; ++i) {
    id[i] = byte_id_[static_cast<uint8_t>(piece[i])];
    prev[i] = i - 1;
    nxt[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    int32_t rank, pos, left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int i) {
    if (i < 0 || nxt[i] < 0) return;
    const auto it = merge_.find((uint64_t(uint32_t(id[i])) << 32) | uint32_t(id[nxt[i]]));
    if (it != merge_.end()) heap.push({it->second.rank, i, id[i], id[nxt[i]]});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const int i = c.pos;
    if (dead[i] || nxt[i] < 0 || id[i] != c.left || id[nxt[i]] != c.right) continue;
    const int j = nxt[i];
    id[i] = merge_.at((uint64_t(uint32_t(c.left)) << 32) | uint32_t(c.right)).merged;
    dead[j] = true;
    nxt[i] = nxt[j];
    if (nxt[j] >= 0) prev[nxt[j]] = i;
    push(prev[i]);
    push(i);
  }
  for (int i = 0; i >= 0; i = nxt[i]) out.push_back(id[i]);
}

void Tokenizer::encode_text(const std::string& text, std::vector<int64_t>& out) const {
  if (text.empty()) return;
  const std::string normal = nfc(text);
  for (const std::string_view piece : pre_->split(normal)) bpe(std::string(piece), out);
}

std::vector<int64_t> Tokenizer::encode(const std::string& prompt, const std::string& origin) const {
  if (prompt.size() > kMaxPromptBytes) {
    throw Error(ErrorKind::kInvalidArgument,
                origin + ": " + std::to_string(prompt.size()) + " bytes is over the tokenizer's limit of " +
                    std::to_string(kMaxPromptBytes) + " bytes; shorten the prompt");
  }
  check_utf8(prompt, origin);
  std::vector<int64_t> ids;
  // Added tokens are matched in the raw text (none of them is normalised): leftmost first, the
  // longest of those starting at one place.
  size_t plain = 0, i = 0;
  while (i < prompt.size()) {
    const std::pair<std::string, int64_t>* best = nullptr;
    for (const auto& a : added_) {
      if (prompt.compare(i, a.first.size(), a.first) == 0 && (!best || a.first.size() > best->first.size()))
        best = &a;
    }
    if (!best) {
      ++i;
      continue;
    }
    encode_text(prompt.substr(plain, i - plain), ids);
    ids.push_back(best->second);
    i += best->first.size();
    plain = i;
  }
  encode_text(prompt.substr(plain), ids);
  return ids;
}

}  // namespace h3::text
