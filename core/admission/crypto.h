// The few primitives of OpenSSL's libcrypto the process world uses (no LibTorch here, so that the
// door's records can be fuzzed on their own).
#pragma once

#include <cstddef>
#include <string>

namespace h3::dist {

// HMAC-SHA256(key, message), raw 32 bytes.
std::string hmac_sha256(const std::string& key, const std::string& message);
// SHA-256 of `data` as 64 lowercase hex digits.
std::string sha256_hex(const std::string& data);
std::string to_hex(const std::string& bytes);
// `n` bytes from the system's cryptographic generator.
std::string random_bytes(size_t n);

}  // namespace h3::dist
