// The door of a process world: the store on the named address, admission by token and
// settings, and the group formed in the sealed view (door.h).
#include "admission/door.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "admission/listener_filter.h"
#include "admission/membership.h"
#include "admission/sealed_store.h"
#include "admission/store_gate.h"
#include "h3/error.h"

namespace h3::dist {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr std::chrono::milliseconds kPoll{20};
constexpr std::chrono::seconds kStillWaitingEvery{60};
constexpr std::chrono::seconds kHandshakeDeadline{3};
constexpr int kUnprovenPlaces = 64;
// Public keys (behind the front end, only token holders reach them; each record authenticated).
constexpr const char* kOpenKey = "h3door/open";
constexpr const char* kClosedKey = "h3door/closed";
// A worker's word that it read the closed record: it only shortens rank 0's wait for its workers
// to read it (a forged one would end that wait early, nothing more), so it carries no proof.
std::string closed_read_key(int rank) {
  return "h3door/closed-read/" + std::to_string(rank);
}
// How long a closing rank 0 gives its waiting workers to read that it closed.
constexpr std::chrono::milliseconds kClosingGrace{300};

std::string hello_key(const std::string& run, int64_t gen, int rank) {
  return "h3door/" + run + "/" + std::to_string(gen) + "/" + std::to_string(rank) + "/hello";
}
std::string verdict_key(const std::string& run, int64_t gen, int rank) {
  return "h3door/" + run + "/" + std::to_string(gen) + "/" + std::to_string(rank) + "/verdict";
}
std::string world_prefix(int64_t gen) {
  return "h3world/" + std::to_string(gen);
}

std::vector<uint8_t> bytes_of(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}
std::string string_of(const std::vector<uint8_t>& v) {
  return std::string(v.begin(), v.end());
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

std::string seconds(std::chrono::milliseconds t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(t.count()) / 1000.0);
  return buf;
}

// What differs between rank 0's settings and a worker's, field by field ("" when equal).
std::string settings_difference(const std::string& mine, const std::string& theirs, int rank) {
  json a, b;
  try {
    a = json::parse(mine);
    b = json::parse(theirs);
  } catch (const json::exception&) {
    return "its settings are not a JSON object";
  }
  std::string out;
  auto show = [](const json& v) {
    if (v.is_null()) return std::string("(absent)");
    std::string s = v.is_string() ? v.get<std::string>() : v.dump();
    return s.size() > 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos
               ? s.substr(0, 12) + "..."
               : s;
  };
  json keys = json::object();
  for (auto it = a.begin(); it != a.end(); ++it) keys[it.key()] = true;
  for (auto it = b.begin(); it != b.end(); ++it) keys[it.key()] = true;
  for (auto it = keys.begin(); it != keys.end(); ++it) {
    const json va = a.contains(it.key()) ? a[it.key()] : json();
    const json vb = b.contains(it.key()) ? b[it.key()] : json();
    if (va == vb) continue;
    if (!out.empty()) out += "; ";
    out += it.key() + " (rank 0: " + show(va) + ", rank " + std::to_string(rank) + ": " + show(vb) + ")";
  }
  return out;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}
bool is_wildcard(const std::string& host) {
  return host == "0.0.0.0" || host == "::" || host.empty();
}

addrinfo* resolve(const std::string& host, int port, int socktype, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                "rendezvous: cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  return res;
}

// A listening socket bound to exactly host:port, handed to the TCPStore server
// (TCPStoreOptions::masterListenFd): c10d's own server would listen on every interface.
int listen_on(const Address& a, int* bound_port) {
  addrinfo* res = resolve(a.host, a.port, SOCK_STREAM, false);
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* p = res; p; p = p->ai_next) {
    fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, p->ai_addr, p->ai_addrlen) == 0 && listen(fd, 128) == 0) break;
    why = std::strerror(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    throw Error(ErrorKind::kDistributed, "rank 0: cannot listen on " + a.str() + " for the rendezvous: " +
                                             why + " (another rank 0 there? a host name of this machine?)");
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  *bound_port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

// Waits until something accepts TCP connections at `a`, at most `bound`; true if it did.
// c10d's client retries its own connect with growing back-offs and connects twice (its
// listener and its callback socket), so a rank 0 that never appears used to cost a worker
// about 2.6x its timeout; this wait keeps it to the timeout.
bool wait_for_listener(const Address& a, std::chrono::milliseconds bound) {
  const auto deadline = Clock::now() + bound;
  for (;;) {
    addrinfo* res = resolve(a.host, a.port, SOCK_STREAM, false);
    bool reached = false;
    for (addrinfo* p = res; p && !reached; p = p->ai_next) {
      const int fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, p->ai_protocol);
      if (fd < 0) continue;
      if (connect(fd, p->ai_addr, p->ai_addrlen) == 0) {
        reached = true;
      } else if (errno == EINPROGRESS) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        pollfd pfd{fd, POLLOUT, 0};
        int err = 0;
        socklen_t len = sizeof err;
        reached = poll(&pfd, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) == 1 &&
                  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
      }
      close(fd);
    }
    freeaddrinfo(res);
    if (reached) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(50),
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())));
  }
}

// This host's address on the route to `a` (no packet is sent: a UDP connect only picks the
// route): a worker's Gloo listener binds there, on the network the user named.
std::string local_address_towards(const Address& a) {
  if (is_loopback(a.host)) return "127.0.0.1";
  addrinfo* res = resolve(a.host, a.port, SOCK_DGRAM, false);
  std::string out;
  for (addrinfo* p = res; p && out.empty(); p = p->ai_next) {
    sockaddr_storage ss{};
    std::memcpy(&ss, p->ai_addr, std::min<size_t>(p->ai_addrlen, sizeof ss));
    try {
      out = source_address_towards(ip_of(ss)).str();
    } catch (const Error&) {
      // no route by this address: try the next
    }
  }
  freeaddrinfo(res);
  if (out.empty()) {
    throw Error(ErrorKind::kDistributed, "rendezvous: no route from this host to " + a.str());
  }
  return out;
}

void log_line(const std::string& s) {
  std::fprintf(stderr, "h3: %s\n", s.c_str());
  std::fflush(stderr);
}

}  // namespace

Address parse_address(const std::string& s, const std::string& what) {
  const size_t colon = s.rfind(':');
  auto bad = [&](const std::string& why) {
    return Error(ErrorKind::kInvalidArgument,
                 what + " = \"" + s + "\": " + why + " (give host:port, e.g. 127.0.0.1:29500)");
  };
  // ":PORT" or a bare port: the store on loopback, the default address.
  if (colon == std::string::npos && !s.empty() && s.find_first_not_of("0123456789") == std::string::npos) {
    return parse_address("127.0.0.1:" + s, what);
  }
  if (colon == std::string::npos) throw bad("no host:port");
  Address a;
  a.host = colon == 0 ? "127.0.0.1" : s.substr(0, colon);
  if (a.host.size() > 2 && a.host.front() == '[' && a.host.back() == ']')
    a.host = a.host.substr(1, a.host.size() - 2);
  const std::string port = s.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) {
    throw bad("the port is not a number");
  }
  a.port = std::stoi(port);
  if (a.port > 65535) throw bad("the port is above 65535");
  return a;
}

// ---- rank 0 ----

DoorServer::DoorServer(DoorOptions opts) : opts_(std::move(opts)) {
  if (opts_.world_size < 2) {
    throw Error(ErrorKind::kInvalidArgument,
                "world-size = " + std::to_string(opts_.world_size) +
                    ": a rendezvous needs at least 2 ranks (rank 0 and a worker)");
  }
  keys_ = door::run_keys(opts_.token, door::new_run_id());
  const int public_fd = listen_on(opts_.address, &port_);
  opts_.address.port = port_;  // what the messages name, also when the system chose the port
  // The store itself on loopback only: what reaches it from the network comes through the front end.
  int store_port = 0;
  const int store_fd = listen_on(Address{"127.0.0.1", 0}, &store_port);
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(store_port);
  o.isServer = true;
  o.waitWorkers = false;
  o.timeout = opts_.world.timeout;
  o.masterListenFd = store_fd;
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
  } catch (const std::exception& e) {
    close(store_fd);
    close(public_fd);
    throw Error(ErrorKind::kDistributed, "rank 0: could not serve the rendezvous store for " +
                                             opts_.address.str() + ": " + first_line(e.what()));
  }
  // The store's own client is connected: from now on the store admits the front end's
  // connections only (store_gate.h).
  auto gate = std::make_shared<StoreGate>(store_fd);
  try {
    gate->close_to_strangers(std::chrono::seconds(2));
  } catch (...) {
    close(public_fd);
    throw;
  }
  FrontEndLimits limits;
  // Proven places: each worker's store client and its check, twice over (a restarted worker
  // while its predecessor's connection is still being torn down). Unproven places: enough that a
  // crowd from up to 32 addresses (IPv6: /64 prefixes), each holding its share of two (a worker
  // needs one at a time), leaves a place free; a thread each, for at most the handshake deadline.
  limits.slots.proven = 4 * opts_.world_size;
  limits.slots.unproven = std::max(kUnprovenPlaces, 4 * opts_.world_size);
  limits.slots.per_source = 2;
  // The proof is 48 bytes, one round trip after the greeting: a connection that has not sent it
  // within a few seconds is not a worker on a working link.
  limits.handshake = std::min<std::chrono::milliseconds>(opts_.world.timeout, kHandshakeDeadline);
  // A worker's handshake (one round trip) completes long before this: its place is never taken
  // by a crowd that keeps reconnecting, while a silent connection's is.
  limits.slots.settle = limits.handshake / 4;
  // A dead link is given up on within half the timeout, so that a rank that fails a collective
  // on the timeout finds its store connection already closed instead of waiting on it again.
  limits.liveness = opts_.world.timeout / 2;
  front_ = std::make_unique<StoreFrontEnd>(public_fd, gate, opts_.token, limits);
  sealed_ = make_sealed_store(store_, opts_.token, keys_.run_id);
}

DoorServer::~DoorServer() {
  try {
    store_->set(kClosedKey, bytes_of(door::encode_closed(keys_, served_)));
    // Workers waiting for a new generation poll every kPoll: let them read it before the store
    // goes, until each has said so or left on rank 0's stop (a lost one is waited for
    // kClosingGrace).
    std::vector<std::string> read;
    for (int r = 1; r < opts_.world_size; ++r) read.push_back(closed_read_key(r));
    const auto until = Clock::now() + kClosingGrace;
    while (Clock::now() < until && !store_->check(read)) std::this_thread::sleep_for(kPoll / 4);
  } catch (...) {
  }
}

std::unique_ptr<Group> DoorServer::form() {
  const int64_t gen = ++generation_;
  door::OpenRecord open{keys_.run_id, opts_.world_size, gen, to_hex(random_bytes(16)), false};
  const auto timeout = opts_.world.timeout;
  // Wrong proofs since the last formation ended: a worker with the wrong token may have tried
  // while rank 0 was still starting (before this formation opened).
  const int64_t wrong_proofs_before = wrong_proofs_reported_;
  store_->set(kOpenKey, bytes_of(door::encode_open(open, opts_.token)));
  std::vector<int> pending;
  for (int r = 1; r < opts_.world_size; ++r) pending.push_back(r);
  std::vector<std::string> refusals;
  const auto deadline = Clock::now() + timeout;
  while (!pending.empty() && Clock::now() < deadline) {
    for (auto it = pending.begin(); it != pending.end();) {
      const int r = *it;
      const std::string key = hello_key(keys_.run_id, gen, r);
      if (!store_->check({key})) {
        ++it;
        continue;
      }
      const std::string raw = string_of(store_->get(key));
      store_->deleteKey(key);
      std::string why;
      const std::optional<door::Hello> hello = door::verify_hello(raw, keys_, gen, r, open.challenge, &why);
      std::string verdict;
      if (!hello) {
        // Nothing of it is read: rank 0 cannot tell whose it was, nor prove anything to its writer.
        verdict = door::encode_unauthenticated_refusal(why);
      } else if (const std::string diff = settings_difference(opts_.settings, hello->settings, r);
                 !diff.empty()) {
        why = "its model or settings differ from rank 0's: " + diff;
        verdict = door::encode_verdict(false, why, keys_, gen, r, hello->nonce);
      } else {
        verdict = door::encode_verdict(true, "", keys_, gen, r, hello->nonce);
      }
      if (hello && why.empty()) {
        log_line("rank 0: rank " + std::to_string(r) + " admitted at " + opts_.address.str());
        it = pending.erase(it);
      } else {
        why = door::printable(why);
        refusals.push_back("rank " + std::to_string(r) + ": " + why);
        log_line("rank 0: refused a peer claiming rank " + std::to_string(r) + " at " + opts_.address.str() +
                 ": " + why);
        ++it;
      }
      store_->set(verdict_key(keys_.run_id, gen, r), bytes_of(verdict));
    }
    if (!pending.empty()) std::this_thread::sleep_for(kPoll);
  }
  open.formed = true;
  store_->set(kOpenKey, bytes_of(door::encode_open(open, opts_.token)));
  const int64_t wrong_proofs = front_->counts().wrong_proof;
  wrong_proofs_reported_ = wrong_proofs;
  if (!pending.empty()) {
    std::string ranks;
    for (int r : pending) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    std::string msg = "rank 0: rank" + std::string(pending.size() > 1 ? "s " : " ") + ranks +
                      " never arrived at the rendezvous " + opts_.address.str() + " within " +
                      seconds(timeout) + " (start each with `h3 worker --rendezvous " + opts_.address.str() +
                      " --world-size " + std::to_string(opts_.world_size) + " --rank R --token-file FILE`)";
    for (const auto& r : refusals) msg += "; refused " + r;
    if (const int64_t wrong = wrong_proofs - wrong_proofs_before; wrong > 0) {
      msg += "; " + std::to_string(wrong) + " connection" + (wrong > 1 ? "s" : "") +
             " to the rendezvous failed the token check (a worker with the wrong token?)";
    }
    throw Error(ErrorKind::kDistributed, msg);
  }
  auto store = c10::make_intrusive<c10d::PrefixStore>(world_prefix(gen), sealed_);
  const std::string host = is_loopback(opts_.address.host)   ? "127.0.0.1"
                           : is_wildcard(opts_.address.host) ? std::string()
                                                             : opts_.address.host;
  std::unique_ptr<Group> g = make_store_group(store, 0, opts_.world_size, opts_.world, host);
  prove_membership(*g, opts_.token, keys_.run_id, gen);
  served_ = true;
  return g;
}

// ---- a worker ----

DoorClient::DoorClient(DoorOptions opts, int rank) : opts_(std::move(opts)), rank_(rank) {
  if (rank_ < 1 || rank_ >= opts_.world_size) {
    throw Error(ErrorKind::kInvalidArgument, "rank = " + std::to_string(rank_) + ": a worker is rank 1.." +
                                                 std::to_string(opts_.world_size - 1) + " of a world of " +
                                                 std::to_string(opts_.world_size));
  }
  const std::string me = "rank " + std::to_string(rank_);
  if (!wait_for_listener(opts_.address, opts_.world.timeout)) {
    throw Error(ErrorKind::kDistributed, me + ": rank 0 never appeared at " + opts_.address.str() +
                                             " within " + seconds(opts_.world.timeout) +
                                             " (nothing accepted a connection there)");
  }
  // c10d's store client talks to this process's tunnel, which proves the token to rank 0's front end.
  // A door that has no place for this worker now is asked again for up to the timeout.
  tunnel_ = std::make_unique<StoreTunnel>(opts_.address.host, opts_.address.port, opts_.token,
                                          opts_.world.timeout / 2, opts_.world.timeout);
  if (const std::string why = tunnel_->check(); !why.empty()) {
    const bool refused = why.find("wrong token") != std::string::npos;
    throw Error(ErrorKind::kDistributed, me + (refused ? ": rank 0 at " + opts_.address.str() +
                                                             " refused this worker: wrong token (" + why + ")"
                                                       : ": " + why));
  }
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(tunnel_->port());
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = opts_.world.timeout;
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
    store_->check({kOpenKey});  // a round trip: the front end took this worker's proof
  } catch (const std::exception& e) {
    const std::string tunnel = tunnel_->last_failure();
    if (tunnel.find("wrong token") != std::string::npos) {
      throw Error(ErrorKind::kDistributed, me + ": rank 0 at " + opts_.address.str() +
                                               " refused this worker: wrong token (" + tunnel + ")");
    }
    throw Error(ErrorKind::kDistributed, me + ": could not use rank 0's store at " + opts_.address.str() +
                                             ": " + (tunnel.empty() ? first_line(e.what()) : tunnel));
  }
}

DoorClient::~DoorClient() = default;

void DoorClient::leave() {
  try {
    store_->set(closed_read_key(rank_), std::vector<uint8_t>{1});
  } catch (const std::exception&) {
    // Rank 0 is gone already: nobody waits.
  }
}

std::unique_ptr<Group> DoorClient::join(std::chrono::milliseconds wait) {
  const std::string me = "rank " + std::to_string(rank_);
  const auto start = Clock::now();
  auto next_note = start + kStillWaitingEvery;
  std::optional<door::OpenRecord> open;
  for (;;) {
    try {
      if (store_->check({kOpenKey})) {
        std::string why;
        const auto o = door::verify_open(string_of(store_->get(kOpenKey)), opts_.token, &why);
        // A record that does not verify is not rank 0's: ignored, as if the door were still shut.
        if (o && o->world_size != opts_.world_size) {
          throw Error(ErrorKind::kDistributed, me + ": rank 0 at " + opts_.address.str() +
                                                   " serves a world of " + std::to_string(o->world_size) +
                                                   " ranks, this worker was started with --world-size " +
                                                   std::to_string(opts_.world_size));
        }
        const bool new_run = o && (!run_ || run_->run_id != o->run_id);
        if (o && new_run) {
          run_ = door::run_keys(opts_.token, o->run_id);
          joined_ = 0;
        }
        if (o && !o->formed && o->generation > joined_) {
          open = o;
          break;
        }
      }
      if (run_ && store_->check({kClosedKey})) {
        std::string why;
        if (const auto served = door::verify_closed(string_of(store_->get(kClosedKey)), *run_, &why)) {
          rank0_served_ = *served;
          leave();
          return nullptr;
        }
        // A closed record of another run, or a forgery: ignored.
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      const std::string tunnel = tunnel_->last_failure();
      // The tunnel knows what ended the connection (closed, reset, no reply on a dead link).
      throw Error(ErrorKind::kDistributed, me + ": lost rank 0's store at " + opts_.address.str() + ": " +
                                               (tunnel.empty() ? first_line(e.what()) : tunnel));
    }
    const auto now = Clock::now();
    if (wait.count() > 0 && now - start >= wait) {
      throw Error(ErrorKind::kDistributed, me + ": rank 0 at " + opts_.address.str() +
                                               " did not open the rendezvous within " + seconds(wait));
    }
    if (now >= next_note) {
      log_line(me + ": still waiting for rank 0 at " + opts_.address.str() + " to open its door (" +
               seconds(std::chrono::duration_cast<std::chrono::milliseconds>(now - start)) + ")");
      next_note = now + kStillWaitingEvery;
    }
    std::this_thread::sleep_for(kPoll);
  }

  const int64_t gen = open->generation;
  const std::string nonce = to_hex(random_bytes(16));
  const std::string vkey = verdict_key(run_->run_id, gen, rank_);
  std::optional<door::Verdict> verdict;
  std::string unauthenticated;  // what an answer rank 0 could not authenticate said
  try {
    store_->set(hello_key(run_->run_id, gen, rank_),
                bytes_of(door::encode_hello({nonce, opts_.settings}, *run_, gen, rank_, open->challenge)));
    const auto deadline = Clock::now() + opts_.world.timeout;
    while (!verdict && Clock::now() < deadline) {
      if (store_->check({vkey})) {
        std::string why;
        const auto v = door::read_verdict(string_of(store_->get(vkey)), *run_, gen, rank_, nonce, &why);
        if (v && v->authenticated) {
          verdict = v;
        } else if (v) {
          unauthenticated = v->reason;
        }
      }
      if (!verdict) std::this_thread::sleep_for(kPoll);
    }
  } catch (const std::exception& e) {
    const std::string tunnel = tunnel_->last_failure();
    throw Error(ErrorKind::kDistributed, me + ": rank 0 at " + opts_.address.str() +
                                             " did not answer this worker's greeting: " +
                                             (tunnel.empty() ? first_line(e.what()) : tunnel));
  }
  if (!verdict) {
    throw Error(ErrorKind::kDistributed,
                me + ": rank 0 at " + opts_.address.str() + " did not admit this worker within " +
                    seconds(opts_.world.timeout) +
                    (unauthenticated.empty()
                         ? std::string()
                         : " (an answer that rank 0 could not authenticate said: " + unauthenticated + ")"));
  }
  if (!verdict->admitted) {
    throw Error(ErrorKind::kDistributed,
                me + ": rank 0 at " + opts_.address.str() + " refused this worker: " + verdict->reason);
  }
  joined_ = gen;
  auto store = c10::make_intrusive<c10d::PrefixStore>(world_prefix(gen),
                                                      make_sealed_store(store_, opts_.token, run_->run_id));
  std::unique_ptr<Group> g =
      make_store_group(store, rank_, opts_.world_size, opts_.world, local_address_towards(opts_.address));
  prove_membership(*g, opts_.token, run_->run_id, gen);
  return g;
}

}  // namespace h3::dist
