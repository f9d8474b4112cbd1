#include "text/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <mutex>

#include "h3/error.h"

namespace h3::text {

struct PreTokenizer::Impl {
  pcre2_code* code = nullptr;
  std::mutex lock;  // guards match data: a PreTokenizer may be shared by threads
  pcre2_match_data* match = nullptr;
};

const char* PreTokenizer::pattern() {
  // Qwen2's pre-tokenizer split (the Split step of its tokenizer), written out from its definition.
  return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}

PreTokenizer::PreTokenizer() : impl_(std::make_unique<Impl>()) {
  int err = 0;
  PCRE2_SIZE at = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern()), PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(ErrorKind::kInternal, std::string("PCRE2 rejects the pre-tokenizer pattern at offset ") +
                                          std::to_string(at) + ": " + reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // interpreted matching when JIT is unavailable
  impl_->match = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  if (!impl_->match) throw Error(ErrorKind::kInternal, "PCRE2: out of memory for match data");
}

PreTokenizer::~PreTokenizer() {
  pcre2_match_data_free(impl_->match);
  pcre2_code_free(impl_->code);
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  std::lock_guard<std::mutex> g(impl_->lock);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    // The text was validated as UTF-8 by the caller: skip PCRE2's own check on every call.
    const int rc =
        pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, impl_->match, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      pieces.push_back(text.substr(pos));
      break;
    }
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw Error(ErrorKind::kInternal,
                  std::string("PCRE2 match failed: ") + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(impl_->match);
    if (ov[0] > pos) pieces.push_back(text.substr(pos, ov[0] - pos));  // text no alternative took
    if (ov[1] == ov[0]) {
      throw Error(ErrorKind::kInternal, "the pre-tokenizer pattern matched an empty piece");
    }
    pieces.push_back(text.substr(ov[0], ov[1] - ov[0]));
    pos = ov[1];
  }
  return pieces;
}

}  // namespace h3::text
