// The store session's handshake and records (store_session.h): HMAC-SHA256 and AES-256-GCM from
// OpenSSL's libcrypto.
#include "admission/store_session.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <memory>

#include "admission/crypto.h"
#include "h3/error.h"

namespace h3::dist::session {

namespace {

constexpr char kGreetingMagic[] = "H3S2";
constexpr char kBusyMagic[] = "H3B2";
constexpr size_t kGcmNonceBytes = 12;

std::string key_of(const std::string& token) {
  return hmac_sha256(token, "h3 store front end");
}

bool same(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// The server's nonce of a greeting (its 16 bytes after the magic).
std::string nonce_of(const std::string& greeting) {
  return greeting.size() == kGreetingBytes ? greeting.substr(kMagicBytes) : std::string();
}

std::string mac(const std::string& token, const char* what, const std::string& greeting,
                const std::string& client_nonce) {
  return hmac_sha256(key_of(token), std::string(what) + "\n" + nonce_of(greeting) + client_nonce);
}

struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree>;

// The GCM nonce of record `seq`: 4 zero bytes and the sequence number, big-endian. Each direction
// has its own key, so a (key, nonce) pair is never used twice.
void gcm_nonce(uint64_t seq, unsigned char out[kGcmNonceBytes]) {
  for (size_t i = 0; i < 4; ++i) out[i] = 0;
  for (size_t i = 0; i < 8; ++i) out[4 + i] = static_cast<unsigned char>(seq >> (56 - 8 * i));
}

void put_length(uint32_t n, char out[kHeaderBytes]) {
  for (size_t i = 0; i < kHeaderBytes; ++i) out[i] = static_cast<char>(n >> (24 - 8 * i));
}
uint32_t get_length(const char* in) {
  uint32_t n = 0;
  for (size_t i = 0; i < kHeaderBytes; ++i) n = (n << 8) | static_cast<unsigned char>(in[i]);
  return n;
}

[[noreturn]] void crypto_failed(const char* what) {
  throw Error(ErrorKind::kInternal, std::string("store session: OpenSSL failed to ") + what);
}

}  // namespace

std::string greeting(const std::string& server_nonce) {
  return std::string(kGreetingMagic, kMagicBytes) + server_nonce;
}

bool is_greeting(const std::string& first20) {
  return first20.size() == kGreetingBytes && first20.compare(0, kMagicBytes, kGreetingMagic) == 0;
}

std::string busy_notice(Busy why) {
  std::string out(kBusyMagic, kMagicBytes);
  out.push_back(static_cast<char>(why));
  out.resize(kGreetingBytes, '\0');
  return out;
}

uint8_t busy_reason(const std::string& first20) {
  if (first20.size() != kGreetingBytes || first20.compare(0, kMagicBytes, kBusyMagic) != 0) return 0;
  return static_cast<uint8_t>(first20[kMagicBytes]);
}

std::string busy_text(uint8_t reason) {
  switch (static_cast<Busy>(reason)) {
    case Busy::kSourceFull:
      return "as many connections from this host's address as rank 0 allows were still proving the token "
             "(another program on this host, or behind the same address, holds them open)";
    case Busy::kFull:
      return "every place rank 0 keeps for connections still proving the token was taken (connections "
             "from other addresses hold them open)";
  }
  return "rank 0 had no place for it (reason " + std::to_string(reason) + ")";
}

std::string client_proof(const std::string& token, const std::string& greeting,
                         const std::string& client_nonce) {
  return client_nonce + mac(token, "client", greeting, client_nonce);
}

bool client_proof_valid(const std::string& token, const std::string& greeting, const std::string& proof) {
  if (greeting.size() != kGreetingBytes || proof.size() != kProofBytes) return false;
  const std::string nonce = proof.substr(0, kNonceBytes);
  return same(proof.substr(kNonceBytes), mac(token, "client", greeting, nonce));
}

std::string server_proof(const std::string& token, const std::string& greeting,
                         const std::string& client_nonce) {
  return mac(token, "server", greeting, client_nonce);
}

std::string full_proof(const std::string& token, const std::string& greeting,
                       const std::string& client_nonce) {
  return mac(token, "full", greeting, client_nonce);
}

Keys session_keys(const std::string& token, const std::string& greeting, const std::string& client_nonce) {
  return Keys{mac(token, "session to-server", greeting, client_nonce),
              mac(token, "session to-client", greeting, client_nonce)};
}

void Sealer::seal(const char* data, size_t n, std::string& out) {
  while (n > 0) {
    const size_t len = std::min(n, kMaxRecordPlain);
    char header[kHeaderBytes];
    put_length(static_cast<uint32_t>(len), header);
    unsigned char iv[kGcmNonceBytes];
    gcm_nonce(seq_++, iv);
    const size_t at = out.size();
    out.append(header, kHeaderBytes);
    out.resize(at + kHeaderBytes + len + kTagBytes);
    auto* body = reinterpret_cast<unsigned char*>(out.data() + at + kHeaderBytes);
    CipherCtx ctx(EVP_CIPHER_CTX_new());
    int got = 0;
    if (!ctx ||
        EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr,
                           reinterpret_cast<const unsigned char*>(key_.data()), iv) != 1 ||
        EVP_EncryptUpdate(ctx.get(), nullptr, &got, reinterpret_cast<const unsigned char*>(header),
                          kHeaderBytes) != 1 ||
        EVP_EncryptUpdate(ctx.get(), body, &got, reinterpret_cast<const unsigned char*>(data),
                          static_cast<int>(len)) != 1 ||
        EVP_EncryptFinal_ex(ctx.get(), body + got, &got) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes, body + len) != 1) {
      crypto_failed("seal a record");
    }
    data += len;
    n -= len;
  }
}

Opener::Status Opener::next(std::string& in, std::string& out, std::string* why) {
  if (in.size() < kHeaderBytes) return Status::kNeedMore;
  const uint32_t len = get_length(in.data());
  if (len == 0 || len > kMaxRecordPlain) {
    if (why) {
      *why = "a record of " + std::to_string(len) + " bytes (they hold 1 to " +
             std::to_string(kMaxRecordPlain) + ")";
    }
    return Status::kBad;
  }
  if (in.size() < kHeaderBytes + len + kTagBytes) return Status::kNeedMore;
  unsigned char iv[kGcmNonceBytes];
  gcm_nonce(seq_, iv);
  const size_t at = out.size();
  out.resize(at + len);
  auto* plain = reinterpret_cast<unsigned char*>(out.data() + at);
  const auto* body = reinterpret_cast<const unsigned char*>(in.data() + kHeaderBytes);
  std::string tag = in.substr(kHeaderBytes + len, kTagBytes);
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  int got = 0;
  if (!ctx ||
      EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr,
                         reinterpret_cast<const unsigned char*>(key_.data()), iv) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &got, reinterpret_cast<const unsigned char*>(in.data()),
                        kHeaderBytes) != 1 ||
      EVP_DecryptUpdate(ctx.get(), plain, &got, body, static_cast<int>(len)) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, tag.data()) != 1) {
    crypto_failed("open a record");
  }
  if (EVP_DecryptFinal_ex(ctx.get(), plain + got, &got) != 1) {
    out.resize(at);
    if (why) *why = "record " + std::to_string(seq_) + " fails authentication";
    return Status::kBad;
  }
  ++seq_;
  in.erase(0, kHeaderBytes + len + kTagBytes);
  return Status::kRecord;
}

}  // namespace h3::dist::session
