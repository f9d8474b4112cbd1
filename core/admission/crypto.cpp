#include "admission/crypto.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "h3/error.h"

namespace h3::dist {

namespace {

[[noreturn]] void crypto_failed(const char* what) {
  throw Error(ErrorKind::kInternal, std::string("OpenSSL failed to ") + what);
}

}  // namespace

std::string hmac_sha256(const std::string& key, const std::string& message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &len)) {
    crypto_failed("compute an HMAC");
  }
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string sha256_hex(const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), out, &len, EVP_sha256(), nullptr) != 1) crypto_failed("hash");
  return to_hex(std::string(reinterpret_cast<const char*>(out), len));
}

std::string to_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    crypto_failed("draw random bytes");
  }
  return out;
}

}  // namespace h3::dist
