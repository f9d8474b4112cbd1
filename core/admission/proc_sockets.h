// IP addresses, and this process's TCP sockets as Linux's /proc shows them: which descriptors are
// sockets (/proc/self/fd) and what each TCP socket of the network namespace is bound and connected
// to (/proc/self/net/tcp, tcp6). The data plane's listener filter and a worker's store tunnel read
// them to tell their own connections from strangers'.
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace h3::dist {

// An IPv4 or IPv6 address. An IPv4-mapped IPv6 address (::ffff:a.b.c.d) is held as the IPv4
// address it maps, as the kernel's packets carry it.
struct IpAddress {
  int family = 0;                   // AF_INET or AF_INET6
  std::array<uint8_t, 16> bytes{};  // network order; the first 4 for AF_INET
  std::string str() const;
  bool operator==(const IpAddress& o) const { return family == o.family && bytes == o.bytes; }
};

// The address of a sockaddr_in / sockaddr_in6.
IpAddress ip_of(const sockaddr_storage& ss);

// "10.0.0.2", "::1": throws h3::Error(kInvalidArgument) naming `text` if it is neither.
IpAddress parse_ip(const std::string& text);

// Socket inode -> this process's descriptor.
std::map<uint64_t, int> socket_descriptors();

// One TCP socket of this network namespace (any process's).
struct TcpEntry {
  IpAddress local, remote;
  int local_port = 0, remote_port = 0;
  int state = 0;       // the kernel's TCP_* numbering: 1 established, 8 close-wait, 10 listening
  uint64_t inode = 0;  // 0 for one without a file yet (in an accept queue) or any more
};
std::vector<TcpEntry> tcp_entries();

// This process's listening TCP sockets: descriptor, socket inode and the address and port bound.
struct ListeningSocket {
  int fd = -1;
  uint64_t inode = 0;
  IpAddress address;  // all zeros for a wildcard
  int port = 0;
};
std::vector<ListeningSocket> listening_sockets();

}  // namespace h3::dist
