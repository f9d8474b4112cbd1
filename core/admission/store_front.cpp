#include "admission/store_front.h"

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

#include "admission/crypto.h"
#include "admission/proc_sockets.h"
#include "admission/store_gate.h"
#include "h3/error.h"

namespace h3::dist {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kRelayBuffer = 1 << 20;  // per direction

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
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
  int fd_ = -1;
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

// How a relay between a plain side (the store, or a worker's store client) and a sealed side (the
// other end of the session) ended.
enum class RelayEnd {
  kStopped,         // the stop signal
  kPlainClosed,     // the plain side closed or failed
  kSealedClosed,    // the far end closed the session
  kSealedReset,     // ... reset it
  kSealedTimedOut,  // no acknowledgement or keep-alive answer within the liveness bound
  kUnreachable,     // the network says the far end cannot be reached any more
  kSealedFailed,    // another error on the session's socket
  kTampered,        // a record failed (why says which)
};

RelayEnd sealed_error(int err, std::string* why) {
  if (err == ECONNRESET || err == EPIPE) return RelayEnd::kSealedReset;
  if (err == ETIMEDOUT) return RelayEnd::kSealedTimedOut;
  if (why) *why = std::strerror(err);
  if (err == EHOSTUNREACH || err == ENETUNREACH || err == ENETDOWN || err == EHOSTDOWN)
    return RelayEnd::kUnreachable;
  return RelayEnd::kSealedFailed;
}

int socket_error(int fd) {
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  return err;
}

// Carries the store's traffic between `plain` and `sealed` until a side closes or fails, a record
// fails, or the stop signal: what `plain` sends travels sealed, what arrives sealed is opened and
// only then handed on. At most about kRelayBuffer is held per direction.
RelayEnd relay_sealed(int plain, int sealed, session::Sealer& sealer, session::Opener& opener, int stop_fd,
                      std::string* why) {
  set_nonblocking(plain);
  set_nonblocking(sealed);
  std::string to_sealed, from_sealed, to_plain;  // records to send; bytes received; opened traffic
  std::vector<char> buf(64 * 1024);
  for (;;) {
    pollfd p[3] = {{plain,
                    static_cast<short>((to_sealed.size() < kRelayBuffer ? POLLIN : 0) |
                                       (to_plain.empty() ? 0 : POLLOUT)),
                    0},
                   {sealed,
                    static_cast<short>((to_plain.size() < kRelayBuffer ? POLLIN : 0) |
                                       (to_sealed.empty() ? 0 : POLLOUT)),
                    0},
                   {stop_fd, POLLIN, 0}};
    const int n = poll(p, 3, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (p[2].revents & POLLIN)) return RelayEnd::kStopped;
    if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t r = recv(sealed, buf.data(), buf.size(), 0);
      if (r == 0) return RelayEnd::kSealedClosed;
      if (r < 0 && errno != EAGAIN && errno != EINTR) return sealed_error(errno, why);
      if (r > 0) from_sealed.append(buf.data(), static_cast<size_t>(r));
      for (;;) {
        const auto st = opener.next(from_sealed, to_plain, why);
        if (st == session::Opener::Status::kBad) return RelayEnd::kTampered;
        if (st == session::Opener::Status::kNeedMore) break;
      }
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t r = recv(plain, buf.data(), buf.size(), 0);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) return RelayEnd::kPlainClosed;
      if (r > 0) sealer.seal(buf.data(), static_cast<size_t>(r), to_sealed);
    }
    if (!to_plain.empty() && (p[0].revents & POLLOUT)) {
      const ssize_t w = send(plain, to_plain.data(), to_plain.size(), MSG_NOSIGNAL);
      if (w < 0 && errno != EAGAIN && errno != EINTR) return RelayEnd::kPlainClosed;
      if (w > 0) to_plain.erase(0, static_cast<size_t>(w));
    }
    if (!to_sealed.empty() && (p[1].revents & POLLOUT)) {
      const ssize_t w = send(sealed, to_sealed.data(), to_sealed.size(), MSG_NOSIGNAL);
      if (w < 0 && errno != EAGAIN && errno != EINTR) return sealed_error(errno, why);
      if (w > 0) to_sealed.erase(0, static_cast<size_t>(w));
    }
    if (p[1].revents & POLLNVAL) return RelayEnd::kSealedFailed;
    if (p[0].revents & POLLNVAL) return RelayEnd::kPlainClosed;
    if ((p[1].revents & POLLERR) && !(p[1].revents & POLLIN)) return sealed_error(socket_error(sealed), why);
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

// Accepts on `listen_fd` until the stop signal, handing each connection and its peer's address
// to `take` (which may refuse it). A full descriptor table waits a moment instead of spinning or failing.
template <typename Take>
void accept_loop(int listen_fd, int stop_fd, Take&& take) {
  for (;;) {
    pollfd p[2] = {{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    const int n = poll(p, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (p[1].revents & POLLIN)) return;
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      continue;
    }
    take(Fd(fd), peer);
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

std::string seconds_text(std::chrono::milliseconds t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(t.count()) / 1000.0);
  return buf;
}

// The source a peer counts as (front_end_slots.h).
std::string source_of_peer(const sockaddr_storage& ss) {
  try {
    return dist::source_of(ip_of(ss));
  } catch (const std::exception&) {
    return "an unknown address";
  }
}

void log_line(const std::string& s) {
  std::fprintf(stderr, "h3: %s\n", s.c_str());
  std::fflush(stderr);
}

// Reads what arrives within the deadline, up to `n` bytes; stops early when the peer closes.
std::string read_some(int fd, size_t n, int stop_fd, Clock::time_point deadline) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    if (!wait_ready(fd, POLLIN, stop_fd, deadline)) break;
    const ssize_t r = recv(fd, out.data() + got, n - got, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

}  // namespace

// ---- rank 0's front end ----

struct StoreFrontEnd::State {
  Fd listen_fd;
  Fd stop{eventfd(0, EFD_CLOEXEC)};
  std::shared_ptr<StoreGate> gate;
  std::string token;
  FrontEndLimits limits;
  mutable std::mutex m;
  FrontEndCounts counts;
  FrontEndSlots slots{SlotLimits{}};
  std::map<uint64_t, int> fds;  // each open connection's descriptor, to close an evicted one
  uint64_t next_id = 0;

  // A newcomer from `source`: a place for it (its id), or a busy notice and none.
  void arrive(Fd fd, const std::string& source, const std::shared_ptr<State>& self) {
    uint64_t id = 0;
    {
      std::lock_guard<std::mutex> lk(m);
      id = ++next_id;
      const FrontEndSlots::Decision d = slots.arrive(id, source, Clock::now());
      if (d.admit != FrontEndSlots::Admit::kAdmitted) {
        ++counts.over_cap;
        const bool source_full = d.admit == FrontEndSlots::Admit::kSourceFull;
        counts.source_full += source_full;
        const std::string notice =
            session::busy_notice(source_full ? session::Busy::kSourceFull : session::Busy::kFull);
        (void)!send(fd.get(), notice.data(), notice.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        return;  // closed as `fd` goes
      }
      if (d.evicted) {
        // Its thread sees the connection fail and leaves; the place is the newcomer's already.
        shutdown(fds.at(*d.evicted), SHUT_RDWR);
        ++counts.evicted;
      }
      ++counts.accepted;
      ++counts.open_now;
      fds[id] = fd.get();
    }
    std::thread([self, id, source, peer = std::move(fd)]() mutable {
      self->serve(id, source, std::move(peer));
    }).detach();
  }

  void serve(uint64_t id, const std::string& source, Fd peer) {
    const auto deadline = Clock::now() + limits.handshake;
    const std::string greeting = session::greeting(random_bytes(session::kNonceBytes));
    std::string proof;
    const bool answered = write_all(peer.get(), greeting, stop.get(), deadline) &&
                          read_exact(peer.get(), proof, session::kProofBytes, stop.get(), deadline);
    const bool proved = answered && session::client_proof_valid(token, greeting, proof);
    FrontEndSlots::Proved place = FrontEndSlots::Proved::kEvicted;
    if (proved) {
      std::lock_guard<std::mutex> lk(m);
      place = slots.prove(id);
      counts.proven_full += place == FrontEndSlots::Proved::kFull;
    }
    const std::string nonce = proof.substr(0, session::kNonceBytes);
    int store = -1;
    if (!answered) {
      std::lock_guard<std::mutex> lk(m);
      ++counts.no_proof;
    } else if (!proved) {
      (void)!send(peer.get(), session::kWrongProof, 4, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::lock_guard<std::mutex> lk(m);
      ++counts.wrong_proof;
    } else if (place == FrontEndSlots::Proved::kFull) {
      write_all(peer.get(), session::full_proof(token, greeting, nonce), stop.get(), deadline);
    } else if (place == FrontEndSlots::Proved::kProven &&
               write_all(peer.get(), session::server_proof(token, greeting, nonce), stop.get(), deadline)) {
      std::string why;
      store = gate->connect(limits.handshake, &why);
      if (store < 0)
        log_line("rank 0: could not carry a proven connection from " + source + " to the store: " + why);
    }
    if (store >= 0) {
      {
        std::lock_guard<std::mutex> lk(m);
        ++counts.relayed;
      }
      set_liveness(peer.get(), limits.liveness);
      const session::Keys keys = session::session_keys(token, greeting, nonce);
      session::Sealer sealer(keys.to_client);
      session::Opener opener(keys.to_server);
      std::string why;
      if (relay_sealed(store, peer.get(), sealer, opener, stop.get(), &why) == RelayEnd::kTampered) {
        {
          std::lock_guard<std::mutex> lk(m);
          ++counts.tampered;
        }
        log_line("rank 0: closed a store connection from " + source + ": " + why +
                 " (something between that worker and rank 0 altered the connection)");
      }
      gate->close(store);
    }
    std::lock_guard<std::mutex> lk(m);
    slots.leave(id);
    fds.erase(id);
    peer.reset();  // after fds forgot it: an eviction never shuts down a reused descriptor
    --counts.open_now;
  }
};

StoreFrontEnd::StoreFrontEnd(int listen_fd, std::shared_ptr<StoreGate> gate, const std::string& token,
                             FrontEndLimits limits)
    : state_(std::make_shared<State>()) {
  state_->listen_fd = Fd(listen_fd);
  state_->gate = std::move(gate);
  state_->token = token;
  state_->limits = limits;
  state_->slots = FrontEndSlots(limits.slots);
  if (state_->stop.get() < 0) throw Error(ErrorKind::kInternal, "store front end: no eventfd");
  acceptor_ = std::thread([s = state_] {
    accept_loop(s->listen_fd.get(), s->stop.get(), [&](Fd fd, const sockaddr_storage& peer) {
      s->arrive(std::move(fd), source_of_peer(peer), s);
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
  std::chrono::milliseconds liveness{60000}, patience{60000};
  mutable std::mutex m;
  std::string failure;
  int failure_rank = 0;  // 3: of the proof, 2: the link lost, 1: anything else
  int open_now = 0;

  std::string where() const { return host + ":" + std::to_string(port); }

  // The cause the worker must report is kept over later, lesser failures: a failed proof over
  // everything (c10d's client retries, and finds rank 0 gone once rank 0 gave up on it), a lost
  // link over failures to connect again.
  void fail(const std::string& why, int rank = 1) {
    std::lock_guard<std::mutex> lk(m);
    if (rank >= failure_rank) {
      failure = why;
      failure_rank = rank;
    }
  }

  struct Upstream {
    Fd fd;
    session::Keys keys;
  };
  // Connects to rank 0's front end and proves the token both ways: the connection ready to
  // relay, or none (and the failure recorded). While the front end has no place for it (a busy
  // notice, or the connection closed before the proof was answered), asks again for at most
  // `patience`, then says what it met.
  Upstream open_upstream() {
    const auto give_up = Clock::now() + patience;
    auto pause = std::chrono::milliseconds(50);
    int tries = 0;
    for (;;) {
      ++tries;
      std::string why, met;
      Fd up = connect_to(host, port, liveness, stop.get(), &why);
      if (up.get() < 0) {
        fail("cannot reach rank 0's store at " + where() + ": " + why);
        return Upstream{};
      }
      const auto deadline = Clock::now() + liveness;
      const std::string greeting = read_some(up.get(), session::kGreetingBytes, stop.get(), deadline);
      if (const uint8_t busy = session::busy_reason(greeting)) {
        met = session::busy_text(busy);
      } else if (!session::is_greeting(greeting)) {
        fail(greeting.compare(0, 3, "H3S") == 0 && greeting.size() > 3
                 ? "rank 0 at " + where() + " speaks another version of the door's handshake (" +
                       greeting.substr(0, 4) + "): run the same h3 on every host"
                 : "what answers at " + where() + " is not an h3 rank 0's store (no greeting)");
        return Upstream{};
      } else {
        const std::string nonce = random_bytes(session::kNonceBytes);
        const std::string answer =
            write_all(up.get(), session::client_proof(token, greeting, nonce), stop.get(), deadline)
                ? read_some(up.get(), session::kMacBytes, stop.get(), deadline)
                : std::string();
        if (answer.size() < session::kMacBytes && answer.compare(0, 4, session::kWrongProof, 4) == 0) {
          fail("rank 0's store at " + where() +
                   " refused this worker's proof of the token: wrong token (rank 0 holds another one)",
               3);
          return Upstream{};
        }
        if (answer == session::server_proof(token, greeting, nonce)) {
          set_liveness(up.get(), liveness);
          return {std::move(up), session::session_keys(token, greeting, nonce)};
        }
        if (answer == session::full_proof(token, greeting, nonce)) {
          met =
              "every place rank 0 keeps for proven connections was taken (more workers than the world "
              "has ranks, or workers started twice?)";
        } else if (answer.size() == session::kMacBytes) {
          fail("what answers at " + where() +
                   " does not hold this world's token: it is not rank 0 of this world",
               3);
          return Upstream{};
        } else {
          met =
              "rank 0 closed the connection before it answered this worker's proof (a newcomer took its "
              "place, or its handshake deadline passed)";
        }
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - Clock::now());
      if (left.count() <= 0) {
        fail("rank 0's door at " + where() + " had no place for this worker's connection in " +
             seconds_text(patience) + " (" + std::to_string(tries) + (tries == 1 ? " try" : " tries") +
             "; the last time " + met + ")");
        return Upstream{};
      }
      // The last wait ends with the patience, for one more try; the stop signal ends it at once.
      pollfd p{stop.get(), POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(std::min(pause, left).count())) != 0) return Upstream{};
      pause = std::min<std::chrono::milliseconds>(pause * 2, std::chrono::seconds(1));
    }
  }

  void carry(Fd local) {
    if (Upstream up = open_upstream(); up.fd.get() >= 0) {
      session::Sealer sealer(up.keys.to_server);
      session::Opener opener(up.keys.to_client);
      std::string why;
      switch (relay_sealed(local.get(), up.fd.get(), sealer, opener, stop.get(), &why)) {
        case RelayEnd::kStopped:
        case RelayEnd::kPlainClosed: break;
        case RelayEnd::kSealedClosed:
          fail("rank 0 at " + where() +
                   " closed the connection to its store (its process ended or closed its door)",
               2);
          break;
        case RelayEnd::kSealedReset:
          fail("rank 0 at " + where() + " reset the connection to its store (its process ended?)", 2);
          break;
        case RelayEnd::kSealedTimedOut:
          fail("no reply from rank 0 at " + where() + " for " + seconds_text(liveness) +
                   ": the network between this host and rank 0's broke, or rank 0 stopped",
               2);
          break;
        case RelayEnd::kUnreachable:
          fail("rank 0 at " + where() + " could no longer be reached (" + why +
                   "): the network between this host and rank 0's broke",
               2);
          break;
        case RelayEnd::kSealedFailed:
          fail("the connection to rank 0's store at " + where() + " failed: " + why, 2);
          break;
        case RelayEnd::kTampered:
          fail("a record from rank 0's store at " + where() + " failed authentication (" + why +
                   "): something between this host and rank 0 altered the connection, so it was closed",
               2);
          break;
      }
    }
    std::lock_guard<std::mutex> lk(m);
    --open_now;
  }
};

StoreTunnel::StoreTunnel(std::string host, int port, const std::string& token,
                         std::chrono::milliseconds liveness, std::chrono::milliseconds patience)
    : state_(std::make_shared<State>()) {
  state_->host = std::move(host);
  state_->port = port;
  state_->token = token;
  state_->liveness = liveness;
  state_->patience = patience;
  state_->listen_fd = Fd(listen_loopback(&port_));
  state_->local_port = port_;
  acceptor_ = std::thread([s = state_] {
    accept_loop(s->listen_fd.get(), s->stop.get(), [&](Fd fd, const sockaddr_storage&) {
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
  if (state_->open_upstream().fd.get() >= 0) return "";
  return last_failure();
}

std::string StoreTunnel::last_failure() const {
  std::lock_guard<std::mutex> lk(state_->m);
  return state_->failure;
}

}  // namespace h3::dist
