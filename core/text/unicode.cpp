#include "text/unicode.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <cstdio>

#include "h3/error.h"

namespace h3::text {

void check_utf8(const std::string& bytes, const std::string& origin) {
  const auto* s = reinterpret_cast<const uint8_t*>(bytes.data());
  const int32_t n = static_cast<int32_t>(bytes.size());
  if (bytes.size() > static_cast<size_t>(INT32_MAX)) {
    throw Error(ErrorKind::kInvalidArgument,
                origin + ": " + std::to_string(bytes.size()) + " bytes is too long");
  }
  int32_t i = 0;
  while (i < n) {
    const int32_t start = i;
    UChar32 c;
    U8_NEXT(s, i, n, c);  // ICU's strict decoder: c < 0 for any ill-formed sequence
    if (c < 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", s[start]);
      throw Error(ErrorKind::kInvalidArgument,
                  origin + ": invalid UTF-8 at byte offset " + std::to_string(start) + " (byte " + hex +
                      "): a prompt must be UTF-8 text; re-encode it (e.g. iconv -t UTF-8)");
    }
  }
}

std::string nfc(const std::string& utf8) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* norm = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) {
    throw Error(ErrorKind::kInternal,
                std::string("ICU's NFC normaliser is unavailable: ") + u_errorName(status));
  }
  const icu::UnicodeString in = icu::UnicodeString::fromUTF8(utf8);
  if (norm->isNormalized(in, status) && U_SUCCESS(status)) return utf8;
  status = U_ZERO_ERROR;
  const icu::UnicodeString out = norm->normalize(in, status);
  if (U_FAILURE(status)) {
    throw Error(ErrorKind::kInternal, std::string("ICU NFC normalisation failed: ") + u_errorName(status));
  }
  std::string result;
  out.toUTF8String(result);
  return result;
}

}  // namespace h3::text
