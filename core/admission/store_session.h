// The session between a worker's store tunnel and rank 0's store front end (admission/store_front.h,
// docs/distributed.md): the handshake that proves the token both ways, and the records that carry
// the store's traffic after it. Pure functions of bytes (no sockets, no LibTorch), so that the
// parsing can be fuzzed (tests/fuzz/door_records_fuzz.cpp).
//
//   front end -> peer: "H3S2" + sn                                  (sn: 16 random bytes)
//   peer -> front end: cn + HMAC(k, "client\n" + sn + cn)           (cn: 16 random bytes; 48 bytes)
//   front end -> peer: HMAC(k, "server\n" + sn + cn)                (32 bytes; the peer checks it)
//
// with k = HMAC(token, "h3 store front end"). The proof covers both nonces, so it is worth nothing
// on another connection (whose sn differs). Then every byte either way travels in records sealed
// with AES-256-GCM under a key of the token and both nonces, one key per direction
// (HMAC(k, "session to-server|to-client\n" + sn + cn)), with the record's sequence number as its
// GCM nonce and its length as authenticated data:
//
//   record: 4-byte big-endian length L (1..kMaxRecordPlain) + L bytes of ciphertext + 16-byte tag
//
// A relay between the two ends that knows no token cannot read, alter, inject, drop, reorder or
// replay a record: the next record the far end opens fails its tag, and the end closes the
// connection.
//
// What a front end may send instead of its greeting or its proof (the peer reads 20 and 32 bytes):
//   "H3B2" + reason byte + 15 zero bytes   instead of the greeting: no place for this connection now
//                                          (unauthenticated: it can only make a worker wait longer)
//   "H3X2"                                 instead of its proof: the peer's proof was wrong
//   HMAC(k, "full\n" + sn + cn)            instead of its proof: the peer proved the token, but every
//                                          place for proven connections is taken (authenticated)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace h3::dist::session {

constexpr size_t kMagicBytes = 4, kNonceBytes = 16, kMacBytes = 32;
constexpr size_t kGreetingBytes = kMagicBytes + kNonceBytes;  // front end -> peer
constexpr size_t kProofBytes = kNonceBytes + kMacBytes;       // peer -> front end
constexpr size_t kHeaderBytes = 4, kTagBytes = 16;
constexpr size_t kMaxRecordPlain = 64 * 1024;  // bytes of store traffic per record

// ---- the handshake ----

std::string greeting(const std::string& server_nonce);
bool is_greeting(const std::string& first20);

// Why a front end had no place for a connection (the busy notice's reason byte).
enum class Busy : uint8_t {
  kSourceFull = 1,  // as many connections from the peer's address as it allows are still proving the token
  kFull = 2,        // every place for connections still proving the token is taken
};
std::string busy_notice(Busy why);
// The reason of a busy notice, or 0 when `first20` is not one.
uint8_t busy_reason(const std::string& first20);
// What a busy notice's reason means, for a worker's message.
std::string busy_text(uint8_t reason);

constexpr char kWrongProof[] = "H3X2";  // the front end's answer to a wrong proof (4 bytes)

// The 48 bytes a peer holding `token` sends for `greeting`, with its own nonce `client_nonce`.
std::string client_proof(const std::string& token, const std::string& greeting,
                         const std::string& client_nonce);
// Whether 48 bytes prove the token for `greeting` (the nonce they carry included).
bool client_proof_valid(const std::string& token, const std::string& greeting, const std::string& proof);
// The front end's answer: that it holds the token too, or that it does but has no place.
std::string server_proof(const std::string& token, const std::string& greeting,
                         const std::string& client_nonce);
std::string full_proof(const std::string& token, const std::string& greeting,
                       const std::string& client_nonce);

// The session's two keys, from the token and both nonces.
struct Keys {
  std::string to_server, to_client;  // 32 bytes each
};
Keys session_keys(const std::string& token, const std::string& greeting, const std::string& client_nonce);

// ---- the records ----

// Seals one direction's records, numbering them from 0.
class Sealer {
 public:
  explicit Sealer(std::string key) : key_(std::move(key)) {}
  // Appends the records of `n` bytes of traffic (split into records of at most kMaxRecordPlain) to `out`.
  void seal(const char* data, size_t n, std::string& out);

 private:
  std::string key_;
  uint64_t seq_ = 0;
};

// Opens one direction's records, in order.
class Opener {
 public:
  explicit Opener(std::string key) : key_(std::move(key)) {}
  enum class Status { kNeedMore, kRecord, kBad };
  // Takes the first record off the front of `in`, if it holds a whole one: kRecord with its
  // traffic appended to `out`; kNeedMore when `in` holds less than a record (nothing taken);
  // kBad (and why) when the record is malformed or fails its tag: the connection is then over.
  Status next(std::string& in, std::string& out, std::string* why);

 private:
  std::string key_;
  uint64_t seq_ = 0;
};

}  // namespace h3::dist::session
