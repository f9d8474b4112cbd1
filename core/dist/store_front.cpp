#include "dist/store_front.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "common/error.h"
#include "dist/crypto.h"
#include "dist/proc_sockets.h"

namespace h3::dist {

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kMagic[] = "H3S1";
constexpr size_t kMagicBytes = 4, kNonceBytes = 16, kMacBytes = 32;
constexpr size_t kGreetingBytes = kMagicBytes + kNonceBytes;  // front end -> peer
constexpr size_t kReplyBytes = kNonceBytes + kMacBytes;       // peer -> front end
constexpr size_t kRelayBuffer = 1 << 20;                      // per direction

std::string key_of(const std::string& token) {
  return hmac_sha256(token, "h3 store front end");
}

bool same(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

void set_nonblocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// Waits until `fd` is ready for `events`, or the stop signal, or the deadline: true when ready.
bool wait_ready(int fd, short events, int stop_fd, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
    const int n = poll(p, 2, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (p[1].revents & POLLIN)) return false;
    if (p[0].revents & (events | POLLERR | POLLHUP)) return true;
  }
}

bool read_exact(int fd, std::string& out, size_t n, int stop_fd, Clock::time_point deadline) {
  out.assign(n, '\0');
  size_t got = 0;
  while (got < n) {
    if (!wait_ready(fd, POLLIN, stop_fd, deadline)) return false;
    const ssize_t r = recv(fd, out.data() + got, n - got, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

bool write_all(int fd, const std::string& data, int stop_fd, Clock::time_point deadline) {
  size_t sent = 0;
  while (sent < data.size()) {
    if (!wait_ready(fd, POLLOUT, stop_fd, deadline)) return false;
    const ssize_t w = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (w <= 0) return false;
    sent += static_cast<size_t>(w);
  }
  return true;
}

// A peer on a dead link (a partition without a reset) is dropped after about `liveness`: TCP
// keep-alive probes an idle connection, the user timeout bounds unacknowledged data.
void set_liveness(int fd, std::chrono::milliseconds liveness) {
  const int one = 1;
  const int idle = static_cast<int>(std::max<int64_t>(1, liveness.count() / 3000));
  const int interval = std::max(1, idle / 3), probes = 3;
  const unsigned user_timeout = static_cast<unsigned>(std::max<int64_t>(1000, liveness.count()));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Carries bytes both ways until a side closes or fails, or the stop signal.
void relay(int a, int b, int stop_fd) {
  set_nonblocking(a);
  set_nonblocking(b);
  std::string to_b, to_a;  // bytes read from a (for b), from b (for a)
  char buf[64 * 1024];
  auto pump_in = [&](int from, std::string& queue) {
    const ssize_t n = recv(from, buf, sizeof buf, 0);
    if (n > 0) queue.append(buf, static_cast<size_t>(n));
    return n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR));
  };
  auto pump_out = [&](int to, std::string& queue) {
    const ssize_t n = send(to, queue.data(), queue.size(), MSG_NOSIGNAL);
    if (n > 0) queue.erase(0, static_cast<size_t>(n));
    return n >= 0 || errno == EAGAIN || errno == EINTR;
  };
  for (;;) {
    pollfd p[3] = {
        {a, static_cast<short>((to_b.size() < kRelayBuffer ? POLLIN : 0) | (to_a.empty() ? 0 : POLLOUT)), 0},
        {b, static_cast<short>((to_a.size() < kRelayBuffer ? POLLIN : 0) | (to_b.empty() ? 0 : POLLOUT)), 0},
        {stop_fd, POLLIN, 0}};
    const int n = poll(p, 3, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (p[2].revents & POLLIN)) return;
    if ((p[0].revents & POLLIN) && !pump_in(a, to_b)) return;
    if ((p[1].revents & POLLIN) && !pump_in(b, to_a)) return;
    if ((p[0].revents & POLLOUT) && !pump_out(a, to_a)) return;
    if ((p[1].revents & POLLOUT) && !pump_out(b, to_b)) return;
    if ((p[0].revents | p[1].revents) & (POLLERR | POLLNVAL)) return;
    if (((p[0].revents | p[1].revents) & POLLHUP) && !((p[0].revents | p[1].revents) & POLLIN)) return;
  }
}

Fd connect_to(const std::string& host, int port, std::chrono::milliseconds bound, int stop_fd,
              std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
    *why = std::string("cannot resolve ") + host + ": " + gai_strerror(rc);
    return Fd();
  }
  const auto deadline = Clock::now() + bound;
  Fd out;
  for (addrinfo* p = res; p && out.get() < 0; p = p->ai_next) {
    Fd fd(socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, p->ai_protocol));
    if (fd.get() < 0) continue;
    if (connect(fd.get(), p->ai_addr, p->ai_addrlen) != 0 && errno != EINPROGRESS) {
      *why = std::strerror(errno);
      continue;
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (!wait_ready(fd.get(), POLLOUT, stop_fd, deadline) ||
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      *why = err ? std::strerror(err) : "no answer";
      continue;
    }
    const int flags = fcntl(fd.get(), F_GETFL);
    fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
    out = std::move(fd);
  }
  freeaddrinfo(res);
  return out;
}

// Whether the loopback connection `fd` (accepted by the tunnel) comes from this very process:
// the socket at its peer's port, connected to the tunnel's port, is one of ours.
bool from_this_process(int fd, int tunnel_port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
  const int peer_port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                       : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  const std::map<uint64_t, int> mine = socket_descriptors();
  for (const TcpEntry& e : tcp_entries()) {
    if (e.local_port == peer_port && e.remote_port == tunnel_port && mine.count(e.inode)) return true;
  }
  return false;
}

int listen_loopback(int* port) {
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (fd.get() < 0 || bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      listen(fd.get(), 16) != 0) {
    throw Error(ErrorKind::kDistributed, std::string("cannot listen on loopback: ") + std::strerror(errno));
  }
  socklen_t len = sizeof a;
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd.release();
}

// Accepts on `listen_fd` until the stop signal, handing each connection to `take` (which may
// refuse it). A full descriptor table waits a moment instead of spinning or failing.
template <typename Take>
void accept_loop(int listen_fd, int stop_fd, Take&& take) {
  for (;;) {
    pollfd p[2] = {{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    const int n = poll(p, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (p[1].revents & POLLIN)) return;
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      continue;
    }
    take(Fd(fd));
  }
}

// Stops an accepting side: the stop signal (every thread polls it), the acceptor joined, the
// listener closed, then a moment for the connections' threads to leave, so that nothing they
// use (the store, for the front end) goes away under a relay that still runs.
template <typename State, typename OpenNow>
void stop_and_drain(State& s, std::thread& acceptor, OpenNow&& open_now) {
  const uint64_t one = 1;
  (void)!write(s.stop.get(), &one, sizeof one);
  if (acceptor.joinable()) acceptor.join();
  s.listen_fd.reset();
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard<std::mutex> lk(s.m);
      if (open_now(s) == 0) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

std::string store_proof(const std::string& token, const std::string& greeting,
                        const std::string& client_nonce) {
  return client_nonce + hmac_sha256(key_of(token), "client\n" + greeting.substr(kMagicBytes));
}

bool store_proof_valid(const std::string& token, const std::string& greeting, const std::string& reply) {
  if (greeting.size() != kGreetingBytes || reply.size() != kReplyBytes) return false;
  const std::string want = hmac_sha256(key_of(token), "client\n" + greeting.substr(kMagicBytes));
  return same(reply.substr(kNonceBytes), want);
}

// ---- rank 0's front end ----

struct StoreFrontEnd::State {
  Fd listen_fd;
  Fd stop{eventfd(0, EFD_CLOEXEC)};
  int store_port = 0;
  std::string token;
  FrontEndLimits limits;
  mutable std::mutex m;
  FrontEndCounts counts;

  void serve(Fd peer) {
    const auto deadline = Clock::now() + limits.handshake;
    const std::string greeting = std::string(kMagic, kMagicBytes) + random_bytes(kNonceBytes);
    std::string reply;
    bool proved = false, answered = false;
    if (write_all(peer.get(), greeting, stop.get(), deadline) &&
        read_exact(peer.get(), reply, kReplyBytes, stop.get(), deadline)) {
      answered = true;
      proved = store_proof_valid(token, greeting, reply);
    }
    Fd store;
    if (proved) {
      const std::string server_proof = hmac_sha256(
          key_of(token), "server\n" + reply.substr(0, kNonceBytes) + greeting.substr(kMagicBytes));
      std::string why;
      if (write_all(peer.get(), server_proof, stop.get(), deadline))
        store = connect_to("127.0.0.1", store_port, limits.handshake, stop.get(), &why);
    }
    {
      std::lock_guard<std::mutex> lk(m);
      if (store.get() >= 0) {
        ++counts.relayed;
      } else if (answered && !proved) {
        ++counts.wrong_proof;
      } else if (!proved) {
        ++counts.no_proof;
      }
    }
    if (store.get() >= 0) {
      set_liveness(peer.get(), limits.liveness);
      relay(peer.get(), store.get(), stop.get());
    }
    std::lock_guard<std::mutex> lk(m);
    --counts.open_now;
  }
};

StoreFrontEnd::StoreFrontEnd(int listen_fd, int store_port, const std::string& token, FrontEndLimits limits)
    : state_(std::make_shared<State>()) {
  state_->listen_fd = Fd(listen_fd);
  state_->store_port = store_port;
  state_->token = token;
  state_->limits = limits;
  if (state_->stop.get() < 0) throw Error(ErrorKind::kInternal, "store front end: no eventfd");
  acceptor_ = std::thread([s = state_] {
    accept_loop(s->listen_fd.get(), s->stop.get(), [&](Fd fd) {
      {
        std::lock_guard<std::mutex> lk(s->m);
        if (s->counts.open_now >= s->limits.max_connections) {
          ++s->counts.over_cap;
          return;  // closed as `fd` goes
        }
        ++s->counts.accepted;
        ++s->counts.open_now;
      }
      std::thread([s, peer = std::move(fd)]() mutable { s->serve(std::move(peer)); }).detach();
    });
  });
}

StoreFrontEnd::~StoreFrontEnd() {
  stop_and_drain(*state_, acceptor_, [](const State& s) { return s.counts.open_now; });
}

FrontEndCounts StoreFrontEnd::counts() const {
  std::lock_guard<std::mutex> lk(state_->m);
  return state_->counts;
}

// ---- a worker's tunnel ----

struct StoreTunnel::State {
  Fd listen_fd;
  Fd stop{eventfd(0, EFD_CLOEXEC)};
  std::string host;
  int port = 0;
  int local_port = 0;
  std::string token;
  std::chrono::milliseconds liveness{60000};
  mutable std::mutex m;
  std::string failure;
  bool proof_failed_ = false;
  int open_now = 0;

  // A failure of the proof either way (rank 0 refused this worker's, or what answers could not
  // prove the token) is kept over later ones (c10d's client retries, and finds rank 0 gone once
  // rank 0 gave up on it): it is the cause the worker must report.
  void fail(const std::string& why, bool of_the_proof = false) {
    std::lock_guard<std::mutex> lk(m);
    if (of_the_proof || !proof_failed_) failure = why;
    proof_failed_ = proof_failed_ || of_the_proof;
  }

  // Connects to rank 0's front end and proves the token both ways: the connection ready to
  // relay, or none (and the failure recorded).
  Fd open_upstream() {
    const std::string where = host + ":" + std::to_string(port);
    std::string why;
    Fd up = connect_to(host, port, liveness, stop.get(), &why);
    const auto deadline = Clock::now() + liveness;
    std::string greeting, server_proof;
    if (up.get() < 0) {
      fail("cannot reach rank 0's store at " + where + ": " + why);
      return Fd();
    }
    if (!read_exact(up.get(), greeting, kGreetingBytes, stop.get(), deadline) ||
        greeting.compare(0, kMagicBytes, kMagic, kMagicBytes) != 0) {
      fail("what answers at " + where + " is not an h3 rank 0's store (no greeting)");
      return Fd();
    }
    const std::string nonce = random_bytes(kNonceBytes);
    if (!write_all(up.get(), store_proof(token, greeting, nonce), stop.get(), deadline) ||
        !read_exact(up.get(), server_proof, kMacBytes, stop.get(), deadline)) {
      fail("rank 0's store at " + where +
               " refused this worker's proof of the token: wrong token (rank 0 holds another one)",
           /*of_the_proof=*/true);
      return Fd();
    }
    if (!same(server_proof, hmac_sha256(key_of(token), "server\n" + nonce + greeting.substr(kMagicBytes)))) {
      fail("what answers at " + where + " does not hold this world's token: it is not rank 0 of this world",
           /*of_the_proof=*/true);
      return Fd();
    }
    set_liveness(up.get(), liveness);
    return up;
  }

  void carry(Fd local) {
    if (Fd up = open_upstream(); up.get() >= 0) {
      relay(local.get(), up.get(), stop.get());
      fail("the connection to rank 0's store at " + host + ":" + std::to_string(port) + " ended");
    }
    std::lock_guard<std::mutex> lk(m);
    --open_now;
  }
};

StoreTunnel::StoreTunnel(std::string host, int port, const std::string& token,
                         std::chrono::milliseconds liveness)
    : state_(std::make_shared<State>()) {
  state_->host = std::move(host);
  state_->port = port;
  state_->token = token;
  state_->liveness = liveness;
  state_->listen_fd = Fd(listen_loopback(&port_));
  state_->local_port = port_;
  acceptor_ = std::thread([s = state_] {
    accept_loop(s->listen_fd.get(), s->stop.get(), [&](Fd fd) {
      // Only this process's own store client: another local user must not borrow the token.
      if (!from_this_process(fd.get(), s->local_port)) return;
      {
        std::lock_guard<std::mutex> lk(s->m);
        ++s->open_now;
      }
      std::thread([s, local = std::move(fd)]() mutable { s->carry(std::move(local)); }).detach();
    });
  });
}

StoreTunnel::~StoreTunnel() {
  stop_and_drain(*state_, acceptor_, [](const State& s) { return s.open_now; });
}

std::string StoreTunnel::check() {
  if (state_->open_upstream().get() >= 0) return "";
  return last_failure();
}

std::string StoreTunnel::last_failure() const {
  std::lock_guard<std::mutex> lk(state_->m);
  return state_->failure;
}

}  // namespace h3::dist
