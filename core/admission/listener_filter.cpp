#include "admission/listener_filter.h"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "h3/error.h"

namespace h3::dist {

namespace {

uint32_t word(const IpAddress& a, int i) {  // the i-th 32-bit word as BPF loads it (big-endian)
  const uint8_t* b = a.bytes.data() + 4 * i;
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

bool is_member(const IpAddress& a, const std::vector<IpAddress>& members) {
  return std::find(members.begin(), members.end(), a) != members.end();
}

}  // namespace

IpAddress source_address_towards(const IpAddress& to) {
  sockaddr_storage dst{};
  socklen_t dst_len = 0;
  if (to.family == AF_INET) {
    auto& a = reinterpret_cast<sockaddr_in&>(dst);
    a.sin_family = AF_INET;
    a.sin_port = htons(9);  // any port: connect() on UDP only looks up the route
    std::memcpy(&a.sin_addr, to.bytes.data(), 4);
    dst_len = sizeof a;
  } else {
    auto& a = reinterpret_cast<sockaddr_in6&>(dst);
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(9);
    std::memcpy(a.sin6_addr.s6_addr, to.bytes.data(), 16);
    dst_len = sizeof a;
  }
  const int fd = socket(to.family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_storage src{};
  socklen_t src_len = sizeof src;
  const bool ok = fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&dst), dst_len) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&src), &src_len) == 0;
  const int err = errno;
  if (fd >= 0) close(fd);
  if (!ok) {
    throw Error(ErrorKind::kDistributed,
                "no route from this host to " + to.str() + ": " + std::strerror(err));
  }
  return ip_of(src);
}

void admit_only(int fd, const std::vector<IpAddress>& members) {
  constexpr uint32_t kNet = static_cast<uint32_t>(SKF_NET_OFF);
  constexpr uint32_t kPass = 0xffffffffu, kDrop = 0;
  std::vector<IpAddress> four, six;
  for (const IpAddress& m : members) (m.family == AF_INET ? four : six).push_back(m);
  // Dispatch on the IP version, then compare the source address with each member's. Every
  // conditional jump is short (cBPF's are 8-bit); the long ones are unconditional.
  std::vector<sock_filter> v4_block, v6_block;
  v4_block.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kNet + 12));  // IPv4 source
  for (const IpAddress& m : four) {
    v4_block.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, word(m, 0), 0, 1));
    v4_block.push_back(BPF_STMT(BPF_RET | BPF_K, kPass));
  }
  v4_block.push_back(BPF_STMT(BPF_RET | BPF_K, kDrop));
  for (const IpAddress& m : six) {
    for (int w = 0; w < 4; ++w) {
      v6_block.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kNet + 8 + 4 * w));  // IPv6 source, word w
      v6_block.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, word(m, w), 0, static_cast<uint8_t>(7 - 2 * w)));
    }
    v6_block.push_back(BPF_STMT(BPF_RET | BPF_K, kPass));
  }
  v6_block.push_back(BPF_STMT(BPF_RET | BPF_K, kDrop));
  std::vector<sock_filter> prog = {
      BPF_STMT(BPF_LD | BPF_B | BPF_ABS, kNet + 0),  // version and header length
      BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, 4),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 4, 0, 1),
      BPF_STMT(BPF_JMP | BPF_JA, 3),  // to the IPv4 block
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 6, 0, 1),
      BPF_STMT(BPF_JMP | BPF_JA, static_cast<uint32_t>(1 + v4_block.size())),  // to the IPv6 block
      BPF_STMT(BPF_RET | BPF_K, kDrop),
  };
  prog.insert(prog.end(), v4_block.begin(), v4_block.end());
  prog.insert(prog.end(), v6_block.begin(), v6_block.end());
  if (prog.size() > BPF_MAXINSNS) {
    throw Error(ErrorKind::kDistributed, "a filter for " + std::to_string(members.size()) +
                                             " member addresses is longer than the kernel takes (" +
                                             std::to_string(BPF_MAXINSNS) + " instructions)");
  }
  sock_fprog fprog{static_cast<unsigned short>(prog.size()), prog.data()};
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &fprog, sizeof fprog) != 0) {
    throw Error(ErrorKind::kDistributed, "could not restrict a listening socket to the world's members: " +
                                             std::string(std::strerror(errno)));
  }
}

int shut_out_strangers(const ListeningSocket& listener, const std::vector<IpAddress>& members, int wait_ms) {
  constexpr int kEstablished = 1, kCloseWait = 8;
  const IpAddress& local = listener.address;
  const int port = listener.port;
  const bool any_local =
      std::all_of(local.bytes.begin(), local.bytes.end(), [](uint8_t b) { return b == 0; });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  std::set<uint64_t> done;
  for (;;) {
    const std::map<uint64_t, int> mine = socket_descriptors();
    bool waiting = false;  // a stranger's connection still in the accept queue (no descriptor yet)
    for (const TcpEntry& e : tcp_entries()) {
      if (e.local_port != port || (!any_local && !(e.local == local))) continue;
      if (e.state != kEstablished && e.state != kCloseWait) continue;
      if (is_member(e.remote, members) || done.count(e.inode)) continue;
      const auto it = e.inode ? mine.find(e.inode) : mine.end();
      if (it == mine.end()) {
        waiting = waiting || e.inode == 0;
        continue;  // another process's (a listener of the same port), or not accepted yet
      }
      shutdown(it->second, SHUT_RDWR);
      done.insert(e.inode);
    }
    if (!waiting) return static_cast<int>(done.size());
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Error(ErrorKind::kDistributed, "a stranger's connection to " + local.str() + " port " +
                                               std::to_string(port) + " was still not accepted after " +
                                               std::to_string(wait_ms) + " ms, so it could not be shut out");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace h3::dist
