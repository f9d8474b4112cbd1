// Gloo's listener admits the world's members only (docs/distributed.md, "What a stranger can
// do"). Gloo's TCP listener accepts any connection and pairs whichever names the expected sequence
// number first; a paired peer that then sends a malformed frame makes Gloo's event loop throw where
// nothing catches it, and the process aborts (gloo/transport/tcp/pair.cc), as does an accept that
// fails for want of descriptors. Gloo itself cannot be told whom to accept, but its listening socket
// is an ordinary socket of this process: a classic BPF socket filter attached to it makes the
// kernel drop every packet, the connection's SYN first, whose source address is not a member's, so
// a stranger on another host never reaches Gloo at all (the sockets of accepted connections inherit
// the filter). A local user of a member's host shares its address and is not kept out: the same
// trust as for the store, which listens on loopback.
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
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

// This host's source address on the route to `to` (a UDP connect picks the route; nothing is
// sent). Throws h3::Error(kDistributed) when there is no route.
IpAddress source_address_towards(const IpAddress& to);

// This process's listening TCP sockets: descriptor and socket inode, from /proc.
struct ListeningSocket {
  int fd = -1;
  uint64_t inode = 0;
};
std::vector<ListeningSocket> listening_sockets();

// Attaches the filter to listening socket `fd`: packets from `members` pass, every other is
// dropped. Throws h3::Error(kDistributed) if the kernel refuses it.
void admit_only(int fd, const std::vector<IpAddress>& members);

// Connections from addresses that are not members, which listening socket `listener_fd` took
// before its filter was attached, are shut down (their owner, Gloo's listener, sees them fail and
// drops them). Returns how many. Waits up to `wait_ms` for ones still in the accept queue to be
// accepted, then throws h3::Error(kDistributed).
int shut_out_strangers(int listener_fd, const std::vector<IpAddress>& members, int wait_ms);

}  // namespace h3::dist
