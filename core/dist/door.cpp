// The door of a process world: the store on the named address, admission by token and
// settings, and the group formed in the sealed view (door.h).
#include "dist/door.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "common/error.h"
#include "dist/sealed_store.h"

namespace h3::dist {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr size_t kMinTokenChars = 16;
constexpr std::chrono::milliseconds kPoll{20};
// Public keys (readable by anyone who reaches the store): only what admission needs.
constexpr const char* kOpenKey = "h3door/open";  // "<generation> <challenge>" or "formed <generation>"
// Sealed: a stranger cannot forge it.
constexpr const char* kClosedKey = "h3door/closed";

std::string hello_key(int64_t gen, int rank) {
  return "h3door/" + std::to_string(gen) + "/" + std::to_string(rank) + "/hello";
}
std::string verdict_key(int64_t gen, int rank) {
  return "h3door/" + std::to_string(gen) + "/" + std::to_string(rank) + "/verdict";
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

bool same_mac(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string hello_mac(const std::string& token, int64_t gen, int rank, const std::string& challenge,
                      const std::string& nonce, const std::string& settings) {
  return to_hex(hmac_sha256(token, "hello\n" + std::to_string(gen) + "\n" + std::to_string(rank) + "\n" +
                                       challenge + "\n" + nonce + "\n" + settings));
}
std::string admit_mac(const std::string& token, int64_t gen, int rank, const std::string& nonce) {
  return to_hex(
      hmac_sha256(token, "admit\n" + std::to_string(gen) + "\n" + std::to_string(rank) + "\n" + nonce));
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
    const int fd = socket(p->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (connect(fd, p->ai_addr, p->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {0};
      const void* addr = ss.ss_family == AF_INET6
                             ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr)
                             : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr);
      if (inet_ntop(ss.ss_family, addr, buf, sizeof buf)) out = buf;
    }
    close(fd);
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

std::string read_token_file(const std::string& path) {
  struct stat st {};
  if (path.empty()) {
    throw Error(
        ErrorKind::kInvalidArgument,
        "a rendezvous needs a token file (token-file / --token-file): a file only its owner may read");
  }
  if (stat(path.c_str(), &st) != 0) {
    throw Error(ErrorKind::kNotFound, "token file " + path + ": " + std::strerror(errno));
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                "token file " + path + " may be read or written by its group or others: run `chmod 600 " +
                    path + "`");
  }
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) {
    if (!in.eof() || line.empty())
      throw Error(ErrorKind::kNotFound, "token file " + path + ": cannot read it");
  }
  const size_t b = line.find_first_not_of(" \t\r");
  const size_t e = line.find_last_not_of(" \t\r");
  const std::string token = b == std::string::npos ? std::string() : line.substr(b, e - b + 1);
  if (token.size() < kMinTokenChars) {
    throw Error(ErrorKind::kInvalidArgument,
                "token file " + path + ": the token must be at least " + std::to_string(kMinTokenChars) +
                    " characters (for instance `head -c 32 /dev/urandom | base64 > " + path + "`)");
  }
  return token;
}

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
  const int fd = listen_on(opts_.address, &port_);
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(port_);
  o.isServer = true;
  o.waitWorkers = false;
  o.timeout = opts_.world.timeout;
  o.masterListenFd = fd;
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>(opts_.address.host, o);
  } catch (const std::exception& e) {
    close(fd);
    throw Error(ErrorKind::kDistributed, "rank 0: could not serve the rendezvous store on " +
                                             opts_.address.str() + ": " + first_line(e.what()));
  }
  sealed_ = make_sealed_store(store_, opts_.token);
}

DoorServer::~DoorServer() {
  try {
    sealed_->set(kClosedKey, bytes_of("closed"));
    // Workers waiting for a new generation poll a few times a second: let them read it.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  } catch (...) {
  }
}

std::unique_ptr<Group> DoorServer::form() {
  const int64_t gen = ++generation_;
  const std::string challenge = to_hex(random_bytes(16));
  const auto timeout = opts_.world.timeout;
  store_->set(kOpenKey, bytes_of(std::to_string(gen) + " " + challenge));
  std::vector<int> pending;
  for (int r = 1; r < opts_.world_size; ++r) pending.push_back(r);
  std::vector<std::string> refusals;
  const auto deadline = Clock::now() + timeout;
  while (!pending.empty() && Clock::now() < deadline) {
    for (auto it = pending.begin(); it != pending.end();) {
      const int r = *it;
      const std::string key = hello_key(gen, r);
      if (!store_->check({key})) {
        ++it;
        continue;
      }
      const std::string raw = string_of(store_->get(key));
      store_->deleteKey(key);
      json verdict = {{"admitted", false}};
      std::string reason;
      std::string nonce;
      try {
        const json hello = json::parse(raw);
        nonce = hello.at("nonce").get<std::string>();
        const std::string settings = hello.at("settings").get<std::string>();
        const std::string mac = hello.at("mac").get<std::string>();
        if (!same_mac(mac, hello_mac(opts_.token, gen, r, challenge, nonce, settings))) {
          reason =
              "wrong token: its proof over this rendezvous' challenge does not verify with rank 0's token";
        } else if (const std::string diff = settings_difference(opts_.settings, settings, r); !diff.empty()) {
          reason = "its model or settings differ from rank 0's: " + diff;
        }
      } catch (const json::exception&) {
        reason = "its greeting is not the h3 door's (a stranger, or another program, at the rendezvous)";
      }
      if (reason.empty()) {
        verdict = {{"admitted", true}, {"mac", admit_mac(opts_.token, gen, r, nonce)}};
        log_line("rank 0: rank " + std::to_string(r) + " admitted at " + opts_.address.str());
        it = pending.erase(it);
      } else {
        verdict["reason"] = reason;
        refusals.push_back("rank " + std::to_string(r) + ": " + reason);
        log_line("rank 0: refused a peer claiming rank " + std::to_string(r) + " at " + opts_.address.str() +
                 ": " + reason);
        ++it;
      }
      store_->set(verdict_key(gen, r), bytes_of(verdict.dump()));
    }
    if (!pending.empty()) std::this_thread::sleep_for(kPoll);
  }
  store_->set(kOpenKey, bytes_of("formed " + std::to_string(gen)));
  if (!pending.empty()) {
    std::string ranks;
    for (int r : pending) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    std::string msg = "rank 0: rank" + std::string(pending.size() > 1 ? "s " : " ") + ranks +
                      " never arrived at the rendezvous " + opts_.address.str() + " within " +
                      seconds(timeout) + " (start each with `h3 worker --rendezvous " + opts_.address.str() +
                      " --world-size " + std::to_string(opts_.world_size) + " --rank R --token-file FILE`)";
    for (const auto& r : refusals) msg += "; refused " + r;
    throw Error(ErrorKind::kDistributed, msg);
  }
  auto store = c10::make_intrusive<c10d::PrefixStore>(world_prefix(gen), sealed_);
  const std::string host = is_loopback(opts_.address.host)   ? "127.0.0.1"
                           : is_wildcard(opts_.address.host) ? std::string()
                                                             : opts_.address.host;
  return make_store_group(store, 0, opts_.world_size, opts_.world, host);
}

// ---- a worker ----

DoorClient::DoorClient(DoorOptions opts, int rank) : opts_(std::move(opts)), rank_(rank) {
  if (rank_ < 1 || rank_ >= opts_.world_size) {
    throw Error(ErrorKind::kInvalidArgument, "rank = " + std::to_string(rank_) + ": a worker is rank 1.." +
                                                 std::to_string(opts_.world_size - 1) + " of a world of " +
                                                 std::to_string(opts_.world_size));
  }
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(opts_.address.port);
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = opts_.world.timeout;
  try {
    if (!wait_for_listener(opts_.address, opts_.world.timeout)) {
      throw Error(ErrorKind::kDistributed, "nothing accepted a connection there");
    }
    // Rank 0's store is up: c10d's client connects at once.
    store_ = c10::make_intrusive<c10d::TCPStore>(opts_.address.host, o);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kDistributed, "rank " + std::to_string(rank_) + ": rank 0 never appeared at " +
                                             opts_.address.str() + " within " + seconds(opts_.world.timeout) +
                                             " (" + first_line(e.what()) + ")");
  }
  sealed_ = make_sealed_store(store_, opts_.token);
}

DoorClient::~DoorClient() = default;

std::unique_ptr<Group> DoorClient::join(std::chrono::milliseconds wait) {
  const std::string me = "rank " + std::to_string(rank_);
  const auto start = Clock::now();
  int64_t gen = 0;
  std::string challenge;
  for (;;) {
    try {
      if (store_->check({kOpenKey})) {
        const std::string open = string_of(store_->get(kOpenKey));
        const size_t sp = open.find(' ');
        if (open.rfind("formed", 0) != 0 && sp != std::string::npos) {
          const int64_t g = std::stoll(open.substr(0, sp));
          if (g > joined_) {
            gen = g;
            challenge = open.substr(sp + 1);
            break;
          }
        }
      }
      if (sealed_->check({kClosedKey})) {
        try {
          sealed_->get(kClosedKey);
          return nullptr;
        } catch (const Error&) {
          // A forged "closed" fails authentication: ignored.
        }
      }
    } catch (const std::exception& e) {
      throw Error(ErrorKind::kDistributed, me + ": lost rank 0's store at " + opts_.address.str() +
                                               " (rank 0 went away): " + first_line(e.what()));
    }
    if (wait.count() > 0 && Clock::now() - start >= wait) {
      throw Error(ErrorKind::kDistributed, me + ": rank 0 at " + opts_.address.str() +
                                               " did not open the rendezvous within " + seconds(wait));
    }
    std::this_thread::sleep_for(kPoll);
  }

  const std::string nonce = to_hex(random_bytes(16));
  const json hello = {{"nonce", nonce},
                      {"settings", opts_.settings},
                      {"mac", hello_mac(opts_.token, gen, rank_, challenge, nonce, opts_.settings)}};
  json verdict;
  try {
    store_->set(hello_key(gen, rank_), bytes_of(hello.dump()));
    store_->wait({verdict_key(gen, rank_)}, opts_.world.timeout);
    verdict = json::parse(string_of(store_->get(verdict_key(gen, rank_))));
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kDistributed,
                me + ": rank 0 at " + opts_.address.str() +
                    " did not answer this worker's greeting: " + first_line(e.what()));
  }
  if (!verdict.value("admitted", false)) {
    throw Error(ErrorKind::kDistributed,
                me + ": rank 0 at " + opts_.address.str() +
                    " refused this worker: " + verdict.value("reason", std::string("(no reason given)")));
  }
  if (!same_mac(verdict.value("mac", std::string()), admit_mac(opts_.token, gen, rank_, nonce))) {
    throw Error(ErrorKind::kDistributed,
                me + ": the rendezvous at " + opts_.address.str() +
                    " admitted this worker without holding the token: it is not rank 0 "
                    "of this world");
  }
  joined_ = gen;
  auto store = c10::make_intrusive<c10d::PrefixStore>(world_prefix(gen), sealed_);
  return make_store_group(store, rank_, opts_.world_size, opts_.world, local_address_towards(opts_.address));
}

}  // namespace h3::dist
