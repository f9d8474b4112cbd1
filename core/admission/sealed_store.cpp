// The sealed store view: hidden key names (HMAC) and AEAD-sealed values (AES-256-GCM), both
// from OpenSSL's libcrypto.
#include "admission/sealed_store.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <memory>

#include "h3/error.h"

namespace h3::dist {

namespace {

constexpr size_t kNonceBytes = 12;  // GCM's standard nonce; random per value
constexpr size_t kTagBytes = 16;

struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree>;

[[noreturn]] void crypto_failed(const char* what) {
  throw Error(ErrorKind::kInternal, std::string("sealed store: OpenSSL failed to ") + what);
}

std::vector<uint8_t> seal(const std::string& key, const std::string& aad, const std::vector<uint8_t>& plain) {
  const std::string nonce = random_bytes(kNonceBytes);
  std::vector<uint8_t> out(kNonceBytes + plain.size() + kTagBytes);
  std::copy(nonce.begin(), nonce.end(), out.begin());
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  const auto* k = reinterpret_cast<const unsigned char*>(key.data());
  const auto* iv = reinterpret_cast<const unsigned char*>(nonce.data());
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, k, iv) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(aad.data()),
                        static_cast<int>(aad.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), out.data() + kNonceBytes, &len, plain.data(),
                        static_cast<int>(plain.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), out.data() + kNonceBytes + len, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes,
                          out.data() + kNonceBytes + plain.size()) != 1) {
    crypto_failed("seal a value");
  }
  return out;
}

std::vector<uint8_t> open_sealed(const std::string& key, const std::string& aad,
                                 const std::vector<uint8_t>& sealed, const std::string& name) {
  if (sealed.size() < kNonceBytes + kTagBytes) {
    throw Error(ErrorKind::kDistributed, "sealed store: the value of '" + name +
                                             "' is not sealed with this world's token (too short): a peer "
                                             "without the token wrote it");
  }
  const size_t n = sealed.size() - kNonceBytes - kTagBytes;
  std::vector<uint8_t> plain(n);
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  std::vector<uint8_t> tag(sealed.end() - kTagBytes, sealed.end());
  if (!ctx ||
      EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr,
                         reinterpret_cast<const unsigned char*>(key.data()), sealed.data()) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(aad.data()),
                        static_cast<int>(aad.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), plain.data(), &len, sealed.data() + kNonceBytes, static_cast<int>(n)) !=
          1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, tag.data()) != 1) {
    crypto_failed("open a value");
  }
  if (EVP_DecryptFinal_ex(ctx.get(), plain.data() + len, &len) != 1) {
    throw Error(ErrorKind::kDistributed,
                "sealed store: the value of '" + name +
                    "' fails authentication: a peer without this world's token wrote it");
  }
  return plain;
}

class SealedStore final : public c10d::Store {
 public:
  SealedStore(c10::intrusive_ptr<c10d::Store> inner, std::string token, std::string context)
      : c10d::Store(inner->getTimeout()),
        inner_(std::move(inner)),
        token_(std::move(token)),
        context_(std::move(context)),
        name_key_(hmac_sha256(token_, "h3 sealed store: names\n" + context_)),
        seal_key_(hmac_sha256(token_, "h3 sealed store: values\n" + context_)) {}

  c10::intrusive_ptr<c10d::Store> clone() override {
    return c10::make_intrusive<SealedStore>(inner_->clone(), token_, context_);
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    const std::string h = hidden(key);
    inner_->set(h, seal(seal_key_, h, value));
  }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>&,
                                  const std::vector<uint8_t>&) override {
    // Not used by Gloo, NCCL or this project; a sealed value has no stable bytes to compare.
    throw Error(ErrorKind::kInternal, "sealed store: compareSet('" + key + "') is not supported");
  }
  std::vector<uint8_t> get(const std::string& key) override {
    const std::string h = hidden(key);
    return open_sealed(seal_key_, h, inner_->get(h), key);
  }
  int64_t add(const std::string& key, int64_t value) override { return inner_->add(hidden(key), value); }
  bool deleteKey(const std::string& key) override { return inner_->deleteKey(hidden(key)); }
  bool check(const std::vector<std::string>& keys) override { return inner_->check(hidden(keys)); }
  int64_t getNumKeys() override { return inner_->getNumKeys(); }
  void wait(const std::vector<std::string>& keys) override { inner_->wait(hidden(keys)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    inner_->wait(hidden(keys), timeout);
  }
  const std::chrono::milliseconds& getTimeout() const noexcept override { return inner_->getTimeout(); }
  void setTimeout(const std::chrono::milliseconds& timeout) override { inner_->setTimeout(timeout); }

 private:
  std::string hidden(const std::string& key) const {
    return "h3sealed/" + to_hex(hmac_sha256(name_key_, key));
  }
  std::vector<std::string> hidden(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto& k : keys) out.push_back(hidden(k));
    return out;
  }

  c10::intrusive_ptr<c10d::Store> inner_;
  std::string token_, context_;
  std::string name_key_, seal_key_;
};

}  // namespace

c10::intrusive_ptr<c10d::Store> make_sealed_store(c10::intrusive_ptr<c10d::Store> inner,
                                                  const std::string& token, const std::string& context) {
  return c10::make_intrusive<SealedStore>(std::move(inner), token, context);
}

}  // namespace h3::dist
