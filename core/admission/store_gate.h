// The gate of rank 0's store on loopback (docs/distributed.md, "What a stranger can do"). c10d's
// TCPStore server has no authentication, record size limit, connection cap or idle deadline, and
// a listener on 127.0.0.1 is reachable by every local user of the host. So once the store's own
// client has connected, its listening socket gets a classic BPF filter that admits only SYNs
// from 127.0.0.1 at source ports this process holds: the front end's connections to the store
// are each bound first to a loopback port (which no other socket can bind while this one holds
// it), the filter is replaced by one that admits that port, then it connects. Every other SYN is
// dropped by the kernel, so a local stranger can neither send the store a byte nor hold one of
// its connections open. Connections the store took before the filter (the moment between its
// start and the filter) are shut down unless their peer is a socket of this process.
#pragma once

#include <chrono>
#include <mutex>
#include <set>
#include <string>

namespace h3::dist {

class StoreGate {
 public:
  // `listen_fd`: the store's listening socket on 127.0.0.1 (the store owns it and closes it; the
  // gate holds a descriptor of its own for the socket).
  explicit StoreGate(int listen_fd);
  ~StoreGate();
  StoreGate(const StoreGate&) = delete;
  StoreGate& operator=(const StoreGate&) = delete;

  int port() const { return port_; }
  // Admits this process's gated connections only from now on, and shuts down the connections the
  // store took that are not this process's own (waiting at most `wait` for ones still queued).
  // Returns how many it shut down. Throws h3::Error(kDistributed) if the kernel refuses the filter.
  int close_to_strangers(std::chrono::milliseconds wait);

  // A connection through the gate: connected within `bound`, or -1 (and why).
  int connect(std::chrono::milliseconds bound, std::string* why);
  // Closes a connection that connect() returned (the gate stops admitting its port first).
  void close(int fd);

  // Connections the filter admits now (for the tests).
  std::set<int> admitted_ports() const;

 private:
  int listen_fd_;  // the gate's own descriptor of the store's listening socket
  int port_ = 0;
  mutable std::mutex m_;
  bool closed_to_strangers_ = false;
  std::set<int> ports_;  // source ports of this process's connections the filter admits

  void attach_filter();  // with m_ held
};

}  // namespace h3::dist
