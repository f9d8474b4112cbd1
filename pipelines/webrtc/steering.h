// Who may change the prompt. On the loopback (the default listen address) whoever can reach the
// port is on this machine and steers. Listening anywhere else, a token drawn at start (printed
// with the page's URL, `?token=...`) must come with every prompt; without it a viewer watches.
#pragma once

#include <string>

namespace h3live {

class Steering {
 public:
  // `listen` is the address the server binds (127.0.0.1, ::1, 0.0.0.0, a LAN address ...).
  explicit Steering(const std::string& listen);

  bool needs_token() const { return !token_.empty(); }
  const std::string& token() const { return token_; }
  // True when this prompt may steer: no token needed, or `given` is the token (compared in
  // constant time: a wrong guess learns nothing from how long the answer took).
  bool allows(const std::string& given) const;

 private:
  std::string token_;  // empty on the loopback
};

bool is_loopback_address(const std::string& address);

}  // namespace h3live
