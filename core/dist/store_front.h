// The public face of rank 0's rendezvous store (docs/distributed.md, "What a stranger can do").
// c10d's TCPStore server has no connection cap, idle timeout or quota, and anyone who reaches it
// may read and write any key; so it listens on loopback only, and rank 0's public address is
// served by this front end, which carries a connection to the store only after its peer proved
// the shared token:
//
//   front end -> peer: "H3S1" + 16 random bytes (sc)
//   peer -> front end: 16 random bytes (cc) + HMAC(k, "client\n" + sc)       (k from the token)
//   front end -> peer: HMAC(k, "server\n" + cc + sc)                         (the peer checks it)
//
// then both relay bytes both ways. A stranger can hold one of at most `max_connections`
// connections for at most the handshake timeout, and send 48 bytes to it; it never reaches the
// store. A worker's StoreTunnel is the other end: c10d's store client in the worker connects to
// the tunnel on loopback, and the tunnel carries it to rank 0's front end.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

namespace h3::dist {

struct FrontEndLimits {
  int max_connections = 8;                    // at once, authenticated or not
  std::chrono::milliseconds handshake{5000};  // to complete the proof, from accept
  std::chrono::milliseconds liveness{60000};  // a peer silent on a dead link: dropped after it
};

// What the front end saw, for its log and the tests.
struct FrontEndCounts {
  int64_t accepted = 0;     // connections taken
  int64_t over_cap = 0;     // closed at once: max_connections were open
  int64_t wrong_proof = 0;  // sent 48 bytes that are not a proof of the token
  int64_t no_proof = 0;     // closed, or silent past the handshake timeout, before proving anything
  int64_t relayed = 0;      // proved the token and were carried to the store
  int open_now = 0;         // connections open now
};

class StoreFrontEnd {
 public:
  // `listen_fd`: a listening socket on the public address (taken over, closed by the front end);
  // `store_port`: the store's loopback port.
  StoreFrontEnd(int listen_fd, int store_port, const std::string& token, FrontEndLimits limits);
  ~StoreFrontEnd();  // closes the listener and every connection
  StoreFrontEnd(const StoreFrontEnd&) = delete;
  StoreFrontEnd& operator=(const StoreFrontEnd&) = delete;

  FrontEndCounts counts() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::thread acceptor_;
};

// A worker's end: listens on 127.0.0.1 (port()) for this process's own store client, and carries
// each of its connections to rank 0's front end at host:port after the handshake. Connections
// from other processes are closed at once. A link that stays dead for `liveness` ends the
// connection (TCP keep-alive and user timeout), so that a partition fails the worker's next
// store operation instead of holding it.
class StoreTunnel {
 public:
  StoreTunnel(std::string host, int port, const std::string& token, std::chrono::milliseconds liveness);
  ~StoreTunnel();
  StoreTunnel(const StoreTunnel&) = delete;
  StoreTunnel& operator=(const StoreTunnel&) = delete;

  int port() const { return port_; }
  // One handshake with rank 0's front end, at once: "" when both sides proved the token, else
  // why not (so that a worker with the wrong token is told now, not after its store client's
  // retries have used up the timeout).
  std::string check();
  // Why the last carried connection ended or failed ("" while none did): the worker's error says it.
  std::string last_failure() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
  int port_ = 0;
  std::thread acceptor_;
};

// The handshake's pieces, exposed for tests and the fuzzer: the 48 bytes a peer must send for a
// front end's 20-byte greeting, and whether 48 bytes prove the token for it.
std::string store_proof(const std::string& token, const std::string& greeting,
                        const std::string& client_nonce);
bool store_proof_valid(const std::string& token, const std::string& greeting, const std::string& reply);

}  // namespace h3::dist
