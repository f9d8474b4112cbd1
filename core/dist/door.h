// The door of a process world (docs/distributed.md): rank 0 serves a c10d TCPStore on the
// address the user named; a worker is admitted only after it proved that it holds the shared
// token (an HMAC over rank 0's fresh challenge) and that its settings match rank 0's; then the
// admitted ranks form their Gloo or NCCL group in the token-sealed view of the store
// (sealed_store.h), under a fresh prefix per formation ("generation"), so that a world can form
// again after a rank was lost.
//
// Why this is sound against a peer without the token: admission needs an HMAC over a challenge
// that is new each generation (no replay), and even a peer that skips the door finds only
// sealed keys: it cannot learn or plant the addresses the group connects to, so it is never a
// member of the group that carries the requests and prompts. What the token does not do: the
// Gloo/NCCL connections themselves are neither encrypted nor authenticated (see the docs).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "dist/group.h"
#include "dist/world.h"

namespace c10d {
class Store;
class TCPStore;
}  // namespace c10d

namespace h3::dist {

// Reads the shared token: the file's first line without surrounding whitespace. Throws
// h3::Error naming the file: kNotFound (unreadable), kInvalidArgument when its group or others
// may read it ("chmod 600 FILE") or when the token is shorter than 16 characters.
std::string read_token_file(const std::string& path);

struct Address {
  std::string host;
  int port = 0;
  std::string str() const { return host + ":" + std::to_string(port); }
};
// "host:port" ("[v6addr]:port" too); ":port" or a bare port means 127.0.0.1 (the default address).
// Throws h3::Error(kInvalidArgument) naming `what`.
Address parse_address(const std::string& s, const std::string& what);

struct DoorOptions {
  Address address;     // where rank 0 serves the store (and binds nothing else)
  int world_size = 2;  // ranks, rank 0 included
  std::string token;   // read_token_file
  // This rank's settings as a flat JSON object of strings (hashes of the configs, shard plan,
  // dtype, backend): a worker's must equal rank 0's field by field.
  std::string settings;
  WorldOptions world;  // timeout (admission, forming, every collective), backend, cuda_device
};

// Rank 0's side. Logs admissions and refusals to stderr (and through `log` when set).
class DoorServer {
 public:
  // Serves the store on opts.address (port 0: the system chooses; see port()). Throws
  // h3::Error(kDistributed) naming the address when it cannot listen there.
  explicit DoorServer(DoorOptions opts);
  ~DoorServer();  // tells waiting workers that rank 0 closed (they exit 0)
  DoorServer(const DoorServer&) = delete;
  DoorServer& operator=(const DoorServer&) = delete;

  int port() const { return port_; }
  // Opens a new generation, admits ranks 1..N-1 within the timeout and forms the group with
  // them. Throws h3::Error(kDistributed) naming the ranks that never arrived and the refusals.
  std::unique_ptr<Group> form();

 private:
  DoorOptions opts_;
  int port_ = 0;
  int64_t generation_ = 0;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  c10::intrusive_ptr<c10d::Store> sealed_;
};

// A worker's side (rank >= 1).
class DoorClient {
 public:
  // Connects to rank 0's store, waiting at most opts.world.timeout for it to appear; throws
  // h3::Error(kDistributed) naming the address.
  DoorClient(DoorOptions opts, int rank);
  ~DoorClient();
  DoorClient(const DoorClient&) = delete;
  DoorClient& operator=(const DoorClient&) = delete;

  // Waits for rank 0 to open a generation later than the last one this client joined, presents
  // the token and settings, and forms the group. `wait`: how long to wait for the door to open
  // (0: as long as rank 0's store is there). Returns nullptr once rank 0 closed (a clean stop).
  // Throws h3::Error(kDistributed): refused (wrong token, different settings: says what
  // differs), rank 0 gone, or the door not opened within `wait`.
  std::unique_ptr<Group> join(std::chrono::milliseconds wait);

 private:
  DoorOptions opts_;
  int rank_;
  int64_t joined_ = 0;  // the last generation this client was admitted to
  c10::intrusive_ptr<c10d::TCPStore> store_;
  c10::intrusive_ptr<c10d::Store> sealed_;
};

}  // namespace h3::dist
