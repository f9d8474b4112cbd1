// The H3 tokenizer: Qwen2's byte-level BPE as the release's tokenizer/ folder defines it
// (vocab.json, merges.txt, tokenizer_config.json), applied the way H3 presents a prompt to its
// text encoder (docs/h3-model.md §3): verbatim, no chat template, no special tokens added.
//
// encode(): every added token typed in the prompt is cut out as its id (leftmost, longest first;
// the text around it stays ordinary text, spaces included); each remaining stretch is NFC-normalised,
// split by the Qwen2 pre-tokenizer, mapped byte by byte to GPT-2's printable characters and merged
// by rank.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "text/pretokenize.h"

namespace h3::text {

class Tokenizer {
 public:
  static constexpr const char* kVocabFile = "vocab.json";
  static constexpr const char* kMergesFile = "merges.txt";
  static constexpr const char* kConfigFile = "tokenizer_config.json";
  // A bound on the prompt, far above any prompt H3 takes (official Context-IR prompts run to a few
  // thousand tokens); it keeps a runaway input from exhausting memory in the encoder.
  static constexpr size_t kMaxPromptBytes = size_t(1) << 20;

  // Reads the three files of `dir`. Throws h3::Error: kNotFound naming a missing file, kFormat for
  // malformed content (naming the file and, where there is one, the line or entry).
  static Tokenizer load(const std::string& dir);

  // The ids of a prompt's raw bytes. "" gives no ids. Throws kInvalidArgument for invalid UTF-8
  // (naming the byte offset) or a prompt over kMaxPromptBytes; `origin` names the prompt's source.
  std::vector<int64_t> encode(const std::string& prompt, const std::string& origin = "prompt") const;

  int64_t base_vocab_size() const { return static_cast<int64_t>(vocab_.size()); }
  int64_t vocab_size() const { return base_vocab_size() + static_cast<int64_t>(added_.size()); }
  size_t merges() const { return merge_count_; }
  // Every added token (content, id), in id order.
  const std::vector<std::pair<std::string, int64_t>>& added_tokens() const { return added_; }
  // The id of a token string (byte-level form for base tokens, content for added ones), or -1.
  int64_t id_of(const std::string& token) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  Tokenizer() = default;
  void bpe(const std::string& piece, std::vector<int64_t>& out) const;
  void encode_text(const std::string& text, std::vector<int64_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merge_;  // (left id << 32 | right id) -> rank, merged id
  size_t merge_count_ = 0;
  int32_t byte_id_[256] = {};  // the id of each single byte's token
  std::vector<std::pair<std::string, int64_t>> added_;
  std::shared_ptr<const PreTokenizer> pre_;
};

// GPT-2's reversible map from bytes to printable characters, as UTF-8: printable Latin-1 bytes
// map to themselves, the other 68 to U+0100.. in byte order.
std::string byte_level_char(uint8_t b);

}  // namespace h3::text
