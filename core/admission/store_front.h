// The public face of rank 0's rendezvous store (docs/distributed.md, "What a stranger can do").
// c10d's TCPStore server has no connection cap, idle timeout or quota, and anyone who reaches it
// may read and write any key; so it listens on loopback only, behind its gate (store_gate.h), and
// rank 0's public address is served by this front end, which carries a connection to the store
// only after its peer proved the shared token, and then only in the session's sealed records
// (store_session.h: the handshake, the records, what a front end may answer instead).
//
// A stranger's connection holds an *unproven* place for at most the handshake deadline and may
// send 48 bytes to it; connections that proved the token hold *proven* places, which silent ones
// never take (front_end_slots.h: the places, shared out by source address). A worker's
// StoreTunnel is the other end: c10d's store client in the worker connects to the tunnel on
// loopback, and the tunnel carries it to rank 0's front end, waiting while the front end has no
// place for it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "admission/front_end_slots.h"
#include "admission/store_session.h"

namespace h3::dist {

class StoreGate;

struct FrontEndLimits {
  SlotLimits slots;                           // places for unproven and proven connections
  std::chrono::milliseconds handshake{3000};  // to complete the proof, from accept
  std::chrono::milliseconds liveness{60000};  // a peer silent on a dead link: dropped after it
};

// What the front end saw, for its log and the tests.
struct FrontEndCounts {
  int64_t accepted = 0;     // connections given a place
  int64_t over_cap = 0;     // refused at once with a busy notice: no place for them
  int64_t source_full = 0;  // of those: their address held as many unproven places as it may
  int64_t evicted = 0;      // unproven connections closed to give their place to a newcomer
  int64_t wrong_proof = 0;  // sent 48 bytes that are not a proof of the token
  int64_t no_proof = 0;     // closed, or silent past the handshake deadline, before proving anything
  int64_t proven_full = 0;  // proved the token when every proven place was taken
  int64_t relayed = 0;      // proved the token and were carried to the store
  int64_t tampered = 0;     // a record that failed authentication after the handshake: closed
  int open_now = 0;         // connections open now
};

class StoreFrontEnd {
 public:
  // `listen_fd`: a listening socket on the public address (taken over, closed by the front end);
  // `gate`: how it connects to the store on loopback. Logs what it closes to stderr.
  StoreFrontEnd(int listen_fd, std::shared_ptr<StoreGate> gate, const std::string& token,
                FrontEndLimits limits);
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
// from other processes are closed at once. A front end that has no place for it now is asked
// again, for at most `patience`. A link that stays dead for `liveness` ends the connection (TCP
// keep-alive and user timeout), so that a partition fails the worker's next store operation
// instead of holding it.
class StoreTunnel {
 public:
  StoreTunnel(std::string host, int port, const std::string& token, std::chrono::milliseconds liveness,
              std::chrono::milliseconds patience);
  ~StoreTunnel();
  StoreTunnel(const StoreTunnel&) = delete;
  StoreTunnel& operator=(const StoreTunnel&) = delete;

  int port() const { return port_; }
  // One handshake with rank 0's front end, now: "" when both sides proved the token, else why
  // not (so that a worker with the wrong token is told now, not after its store client's retries
  // have used up the timeout).
  std::string check();
  // Why the last carried connection ended or failed ("" while none did): the worker's error says it.
  // A failure of the proof is kept over later ones, and a link lost over later failures to connect.
  std::string last_failure() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
  int port_ = 0;
  std::thread acceptor_;
};

// The handshake's check, for tests and the fuzzer (store_session.h).
inline std::string store_proof(const std::string& token, const std::string& greeting,
                               const std::string& client_nonce) {
  return session::client_proof(token, greeting, client_nonce);
}
inline bool store_proof_valid(const std::string& token, const std::string& greeting,
                              const std::string& reply) {
  return session::client_proof_valid(token, greeting, reply);
}

}  // namespace h3::dist
