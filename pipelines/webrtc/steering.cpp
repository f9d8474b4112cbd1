#include "steering.h"

#include <gio/gio.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <stdexcept>

namespace h3live {

bool is_loopback_address(const std::string& address) {
  GInetAddress* a = g_inet_address_new_from_string(address.c_str());
  if (a == nullptr) return address == "localhost";
  const bool loopback = g_inet_address_get_is_loopback(a);
  g_object_unref(a);
  return loopback;
}

Steering::Steering(const std::string& listen) {
  if (is_loopback_address(listen)) return;
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1)
    throw std::runtime_error("could not draw the steering token (RAND_bytes)");
  static const char kHex[] = "0123456789abcdef";
  for (unsigned char b : bytes) {
    token_ += kHex[b >> 4];
    token_ += kHex[b & 15];
  }
}

bool Steering::allows(const std::string& given) const {
  if (token_.empty()) return true;
  return given.size() == token_.size() && CRYPTO_memcmp(given.data(), token_.data(), token_.size()) == 0;
}

}  // namespace h3live
