// The Unicode steps of the tokenizer, done by ICU (no hand-written tables): strict UTF-8
// validation and NFC normalisation.
#pragma once

#include <cstddef>
#include <string>

namespace h3::text {

// Throws h3::Error(kInvalidArgument) for bytes that are not well-formed UTF-8 (overlong forms,
// surrogates, code points above U+10FFFF, truncated sequences), naming `origin`, the byte offset
// and the byte's value.
void check_utf8(const std::string& bytes, const std::string& origin);

// The NFC form of valid UTF-8 text (check_utf8 first).
std::string nfc(const std::string& utf8);

}  // namespace h3::text
