// A transparent TCP relay for the door's tests: it sits between a worker's tunnel and rank 0's
// front end (the man in the middle of docs/distributed.md), carries the bytes both ways, and on
// request flips a byte, replays what it carried, keeps the first bytes it saw, or black-holes
// the link: it stops carrying and drops every packet from the tunnel's side, as a network that
// broke without a reset would (a classic BPF filter that drops all on its socket).
#pragma once

#include <arpa/inet.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace h3test_relay {

class TcpRelay {
 public:
  // Bytes counted from the start of each direction of a connection: the client's (the tunnel's)
  // first 48 are its proof, the front end's first 52 its greeting and its own proof; records
  // follow.
  struct Plan {
    long flip_to_server_at = -1;    // XOR 0x01 into this byte of what the client sends
    long flip_to_client_at = -1;    // ... of what the front end sends
    long repeat_to_server_at = -1;  // once this many bytes went to the server, send them again
                                    // from byte 48 on (a replay of the records carried so far)
  };

  TcpRelay(int upstream_port, Plan plan) : upstream_(upstream_port), plan_(plan) {
    listen_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(listen_, 16);
    socklen_t len = sizeof a;
    getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~TcpRelay() {
    stop_ = true;
    shutdown(listen_, SHUT_RDWR);
    acceptor_.join();
    for (auto& t : conns_) t.join();
    close(listen_);
  }

  int port() const { return port_; }
  // Stops carrying and drops every packet the tunnel's side sends from now on.
  void black_hole() { black_hole_ = true; }
  // The first 48 bytes the first client sent (its proof), once it sent them.
  std::string first_proof() {
    std::lock_guard<std::mutex> lk(m_);
    return first_proof_;
  }

 private:
  int upstream_, port_ = 0, listen_ = -1;
  Plan plan_;
  std::atomic<bool> stop_{false}, black_hole_{false};
  std::thread acceptor_;
  std::vector<std::thread> conns_;
  std::mutex m_;
  std::string first_proof_;

  void accept_loop() {
    while (!stop_) {
      const int c = accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      conns_.emplace_back([this, c] { carry(c); });
    }
  }

  static void drop_everything(int fd) {
    sock_filter drop[] = {BPF_STMT(BPF_RET | BPF_K, 0)};
    sock_fprog prog{1, drop};
    setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog);
  }

  void carry(int client) {
    const int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(upstream_));
    if (connect(up, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      close(up);
      close(client);
      return;
    }
    long to_server = 0, to_client = 0;
    std::string carried;  // what went to the server after the proof, for a replay
    bool repeated = false, holed = false;
    char buf[4096];
    while (!stop_) {
      if (black_hole_ && !holed) {
        drop_everything(client);
        holed = true;
      }
      pollfd p[2] = {{client, POLLIN, 0}, {up, POLLIN, 0}};
      if (poll(p, 2, 50) <= 0) continue;
      if (holed) {  // read and forget: nothing crosses any more
        if (p[1].revents & POLLIN) (void)!recv(up, buf, sizeof buf, MSG_DONTWAIT);
        continue;
      }
      if (p[0].revents & (POLLIN | POLLHUP)) {
        const ssize_t n = recv(client, buf, sizeof buf, 0);
        if (n <= 0) break;
        std::string chunk(buf, static_cast<size_t>(n));
        for (ssize_t i = 0; i < n; ++i) {
          if (to_server + i == plan_.flip_to_server_at) chunk[static_cast<size_t>(i)] ^= 0x01;
        }
        {
          std::lock_guard<std::mutex> lk(m_);
          if (first_proof_.size() < 48) first_proof_ += chunk.substr(0, 48 - first_proof_.size());
        }
        to_server += n;
        if (to_server > 48)
          carried += chunk.substr(static_cast<size_t>(std::max<long>(0, 48 - (to_server - n))));
        (void)!send(up, chunk.data(), chunk.size(), MSG_NOSIGNAL);
        if (!repeated && plan_.repeat_to_server_at >= 0 && to_server >= plan_.repeat_to_server_at) {
          (void)!send(up, carried.data(), carried.size(), MSG_NOSIGNAL);
          repeated = true;
        }
      }
      if (p[1].revents & (POLLIN | POLLHUP)) {
        const ssize_t n = recv(up, buf, sizeof buf, 0);
        if (n <= 0) break;
        for (ssize_t i = 0; i < n; ++i) {
          if (to_client + i == plan_.flip_to_client_at) buf[i] ^= 0x01;
        }
        to_client += n;
        (void)!send(client, buf, static_cast<size_t>(n), MSG_NOSIGNAL);
      }
    }
    close(up);
    close(client);
  }
};

}  // namespace h3test_relay
