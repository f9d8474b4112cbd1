// The Qwen2 pre-tokenizer: the regular expression that cuts normalised text into the pieces BPE
// works on (contractions, letter runs with one leading non-letter, single digits, punctuation
// runs, newline runs, whitespace runs). PCRE2 in UTF + UCP mode supplies \p{L}, \p{N} and \s.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace h3::text {

class PreTokenizer {
 public:
  PreTokenizer();  // compiles (and JIT-compiles where available) the pattern once
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // The pieces of valid UTF-8 `text`, in order; they concatenate back to `text`.
  std::vector<std::string_view> split(std::string_view text) const;

  static const char* pattern();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace h3::text
