#include "admission/store_gate.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "admission/proc_sockets.h"
#include "h3/error.h"

namespace h3::dist {

namespace {

using Clock = std::chrono::steady_clock;

int local_port_of(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return -1;
  return ntohs(a.sin_port);
}

}  // namespace

// A descriptor of its own for the same socket: the gate changes the filter until its last
// connection closed, which may be after the store closed its descriptor (whose number could
// then name another file).
StoreGate::StoreGate(int listen_fd)
    : listen_fd_(fcntl(listen_fd, F_DUPFD_CLOEXEC, 0)), port_(local_port_of(listen_fd)) {
  if (listen_fd_ < 0) {
    throw Error(ErrorKind::kDistributed,
                std::string("rank 0's store gate: cannot hold its socket: ") + std::strerror(errno));
  }
}

StoreGate::~StoreGate() {
  ::close(listen_fd_);
}

void StoreGate::attach_filter() {
  constexpr uint32_t kNet = static_cast<uint32_t>(SKF_NET_OFF);
  constexpr uint32_t kPass = 0xffffffffu, kDrop = 0;
  const uint32_t loopback = INADDR_LOOPBACK;  // 127.0.0.1 as BPF loads it
  std::vector<sock_filter> prog = {
      BPF_STMT(BPF_LD | BPF_B | BPF_ABS, kNet + 0),  // IP version
      BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, 4),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 4, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, kDrop),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kNet + 12),  // IPv4 source
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, loopback, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, kDrop),
      BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, kNet + 0),  // X = the IPv4 header's length
      BPF_STMT(BPF_LD | BPF_H | BPF_IND, kNet + 0),   // the TCP source port, after it
  };
  for (int p : ports_) {
    prog.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(p), 0, 1));
    prog.push_back(BPF_STMT(BPF_RET | BPF_K, kPass));
  }
  prog.push_back(BPF_STMT(BPF_RET | BPF_K, kDrop));
  sock_fprog fprog{static_cast<unsigned short>(prog.size()), prog.data()};
  if (setsockopt(listen_fd_, SOL_SOCKET, SO_ATTACH_FILTER, &fprog, sizeof fprog) != 0) {
    throw Error(ErrorKind::kDistributed, "could not close rank 0's store on 127.0.0.1 port " +
                                             std::to_string(port_) +
                                             " to other local users: " + std::strerror(errno));
  }
}

int StoreGate::close_to_strangers(std::chrono::milliseconds wait) {
  {
    std::lock_guard<std::mutex> lk(m_);
    attach_filter();
    closed_to_strangers_ = true;
  }
  // What the store took before: each accepted connection whose peer is not a socket of this
  // process is shut down (the store then closes it).
  constexpr int kEstablished = 1, kSynRecv = 3, kCloseWait = 8;
  const auto deadline = Clock::now() + wait;
  std::set<uint64_t> done;
  for (;;) {
    const std::map<uint64_t, int> mine = socket_descriptors();
    const std::vector<TcpEntry> all = tcp_entries();
    auto peer_is_mine = [&](const TcpEntry& accepted) {
      for (const TcpEntry& e : all) {
        if (e.local_port == accepted.remote_port && e.remote_port == port_ && e.local == accepted.remote &&
            mine.count(e.inode))
          return true;
      }
      return false;
    };
    bool waiting = false, handshaking = false;
    for (const TcpEntry& e : all) {
      if (e.local_port != port_) continue;
      // A handshake the client has finished but this side has not yet seen end (its last ACK
      // still on its way under load): it becomes an accepted connection in a moment. One that
      // never ends (a SYN whose ACK never comes) is waited for only until the deadline.
      if (e.state == kSynRecv) {
        handshaking = true;
        continue;
      }
      if (e.state != kEstablished && e.state != kCloseWait) continue;
      if (done.count(e.inode) || peer_is_mine(e)) continue;
      const auto it = e.inode ? mine.find(e.inode) : mine.end();
      if (it == mine.end()) {
        waiting = waiting || e.inode == 0;  // still in the accept queue
        continue;
      }
      shutdown(it->second, SHUT_RDWR);
      done.insert(e.inode);
    }
    if (!waiting && !handshaking) return static_cast<int>(done.size());
    if (Clock::now() >= deadline) {
      if (!waiting) return static_cast<int>(done.size());
      throw Error(ErrorKind::kDistributed, "a stranger's connection to rank 0's store on 127.0.0.1 port " +
                                               std::to_string(port_) + " was still not accepted after " +
                                               std::to_string(wait.count()) +
                                               " ms, so it could not be shut out");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int StoreGate::connect(std::chrono::milliseconds bound, std::string* why) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *why = std::strerror(errno);
    return -1;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Bound without SO_REUSEADDR: while this socket holds 127.0.0.1:port, no other can bind it.
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    *why = std::string("cannot bind a loopback port: ") + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  const int port = local_port_of(fd);
  {
    std::lock_guard<std::mutex> lk(m_);
    ports_.insert(port);
    if (closed_to_strangers_) attach_filter();
  }
  a.sin_port = htons(static_cast<uint16_t>(port_));
  int err = 0;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      socklen_t len = sizeof err;
      err = poll(&p, 1, static_cast<int>(bound.count())) == 1 &&
                    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0
                ? err
                : ETIMEDOUT;
    }
  }
  if (err != 0) {
    *why = "cannot connect to rank 0's store on 127.0.0.1 port " + std::to_string(port_) + ": " +
           std::strerror(err);
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

void StoreGate::close(int fd) {
  const int port = local_port_of(fd);
  {
    std::lock_guard<std::mutex> lk(m_);
    if (ports_.erase(port) && closed_to_strangers_) attach_filter();
  }
  ::close(fd);
}

std::set<int> StoreGate::admitted_ports() const {
  std::lock_guard<std::mutex> lk(m_);
  return ports_;
}

}  // namespace h3::dist
