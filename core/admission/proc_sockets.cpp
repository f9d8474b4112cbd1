#include "admission/proc_sockets.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "h3/error.h"

namespace h3::dist {

namespace {

IpAddress v4(const void* four_bytes) {
  IpAddress a;
  a.family = AF_INET;
  std::memcpy(a.bytes.data(), four_bytes, 4);
  return a;
}

IpAddress v6(const uint8_t* sixteen) {
  static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(sixteen, kMapped, sizeof kMapped) == 0) return v4(sixteen + 12);
  IpAddress a;
  a.family = AF_INET6;
  std::memcpy(a.bytes.data(), sixteen, 16);
  return a;
}

// "0100007F:1F90" (IPv4) or 32 hex digits then ":PORT" (IPv6): each 32-bit word as the kernel
// printed it, in this host's byte order.
bool parse_endpoint(const std::string& s, IpAddress& ip, int& port) {
  const size_t colon = s.find(':');
  if (colon == std::string::npos || (colon != 8 && colon != 32)) return false;
  uint8_t bytes[16];
  for (size_t w = 0; w < colon / 8; ++w) {
    const uint32_t v = static_cast<uint32_t>(std::stoul(s.substr(8 * w, 8), nullptr, 16));
    std::memcpy(bytes + 4 * w, &v, 4);
  }
  ip = colon == 8 ? v4(bytes) : v6(bytes);
  port = static_cast<int>(std::stoul(s.substr(colon + 1), nullptr, 16));
  return true;
}

}  // namespace

std::string IpAddress::str() const {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (!inet_ntop(family, bytes.data(), buf, sizeof buf)) return "(no address)";
  return buf;
}

IpAddress ip_of(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return v4(&reinterpret_cast<const sockaddr_in&>(ss).sin_addr);
  if (ss.ss_family == AF_INET6) return v6(reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr.s6_addr);
  throw Error(ErrorKind::kInternal, "ip_of: address family " + std::to_string(ss.ss_family) + " is not IP");
}

IpAddress parse_ip(const std::string& text) {
  uint8_t bytes[16];
  if (inet_pton(AF_INET, text.c_str(), bytes) == 1) return v4(bytes);
  if (inet_pton(AF_INET6, text.c_str(), bytes) == 1) return v6(bytes);
  throw Error(ErrorKind::kInvalidArgument, "'" + text + "' is not an IPv4 or IPv6 address");
}

std::map<uint64_t, int> socket_descriptors() {
  std::map<uint64_t, int> out;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char target[64] = {0};
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
    unsigned long long inode = 0;
    if (n > 0 && std::sscanf(target, "socket:[%llu]", &inode) == 1) out[inode] = std::atoi(e->d_name);
  }
  closedir(d);
  return out;
}

std::vector<TcpEntry> tcp_entries() {
  std::vector<TcpEntry> out;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout;
      unsigned long long inode = 0;
      if (!(f >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >>
            inode))
        continue;
      TcpEntry e;
      try {
        if (!parse_endpoint(local, e.local, e.local_port) || !parse_endpoint(remote, e.remote, e.remote_port))
          continue;
        e.state = static_cast<int>(std::stoul(state, nullptr, 16));
      } catch (const std::exception&) {
        continue;
      }
      e.inode = inode;
      out.push_back(e);
    }
  }
  return out;
}

std::vector<ListeningSocket> listening_sockets() {
  const std::map<uint64_t, int> mine = socket_descriptors();
  std::vector<ListeningSocket> out;
  for (const TcpEntry& e : tcp_entries()) {
    constexpr int kListen = 10;
    if (e.state != kListen) continue;
    const auto it = mine.find(e.inode);
    if (it != mine.end()) out.push_back({it->second, e.inode, e.local, e.local_port});
  }
  return out;
}

}  // namespace h3::dist
