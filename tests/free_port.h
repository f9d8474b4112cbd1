// A loopback TCP port that nobody listens on now (the kernel's choice, released before use):
// for tests whose rank 0 serves a rendezvous store on a port it is given.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace h3test_net {

inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// A TCP connection to 127.0.0.1:port (a stranger's, in the tests): the descriptor, or -1.
inline int connect_loopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// `ip` (IPv4 or IPv6 text) and `port` as a socket address, and its length.
inline sockaddr_storage endpoint(const std::string& ip, int port) {
  sockaddr_storage ss{};
  auto& in = reinterpret_cast<sockaddr_in&>(ss);
  auto& in6 = reinterpret_cast<sockaddr_in6&>(ss);
  if (inet_pton(AF_INET, ip.c_str(), &in.sin_addr) == 1) {
    in.sin_family = AF_INET;
    in.sin_port = htons(static_cast<uint16_t>(port));
  } else {
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET6, ip.c_str(), &in6.sin6_addr);
  }
  return ss;
}
inline socklen_t length(const sockaddr_storage& ss) {
  return ss.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
}

// A non-blocking connection from address `from` to `to`:port, started: its descriptor (-1 if
// `from` cannot be bound).
inline int start_connect(const std::string& from, const std::string& to, int port) {
  const sockaddr_storage src = endpoint(from, 0), dst = endpoint(to, port);
  const int fd = socket(dst.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&src), length(src)) != 0) {
    close(fd);
    return -1;
  }
  connect(fd, reinterpret_cast<const sockaddr*>(&dst), length(dst));
  return fd;
}

// The same, completed within `ms`: its descriptor, else -1 (a stranger whose SYNs are dropped).
inline int connect_from(const std::string& from, const std::string& to, int port, int ms = 700) {
  const int fd = start_connect(from, to, port);
  if (fd < 0) return -1;
  pollfd p{fd, POLLOUT, 0};
  int err = 0;
  socklen_t len = sizeof err;
  if (poll(&p, 1, ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether such a connection completes.
inline bool connects(const std::string& from, const std::string& to, int port) {
  const int fd = connect_from(from, to, port);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

// How many of the started connections `fds` have completed (polled once, no waiting), closing
// them all: what a flood of strangers got through.
inline int count_connected_and_close(const std::vector<int>& fds) {
  int connected = 0;
  for (int fd : fds) {
    int err = 0;
    socklen_t len = sizeof err;
    pollfd p{fd, POLLOUT, 0};
    connected += poll(&p, 1, 0) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    close(fd);
  }
  return connected;
}

}  // namespace h3test_net
