// A view of a c10d store that only holders of the shared token can use (docs/distributed.md,
// "The token"). Anyone who can reach a TCPStore can list, read and write all of its keys, so
// a secret key prefix would hide nothing; instead every key name is replaced by
// HMAC-SHA256(token, name) and every value is sealed with AES-256-GCM under a key derived from
// the token, with the hidden name as authenticated data. A peer without the token sees opaque
// names and ciphertext: it cannot read the Gloo/NCCL addresses or NCCL ids the ranks exchange,
// cannot plant its own (a forged value fails authentication), and cannot move a value to another
// key. Counters (add) stay bare integers under hidden names: at worst a stranger could disturb
// them, which denies service but admits nobody.
#pragma once

#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace h3::dist {

// `token`: the shared secret (read_token_file). The view keeps `inner`'s timeout.
c10::intrusive_ptr<c10d::Store> make_sealed_store(c10::intrusive_ptr<c10d::Store> inner,
                                                  const std::string& token);

// HMAC-SHA256(key, message), raw 32 bytes.
std::string hmac_sha256(const std::string& key, const std::string& message);
// SHA-256 of `data` as 64 lowercase hex digits.
std::string sha256_hex(const std::string& data);
std::string to_hex(const std::string& bytes);
// `n` bytes from the system's cryptographic generator.
std::string random_bytes(size_t n);

}  // namespace h3::dist
