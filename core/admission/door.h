// The door of a process world (docs/distributed.md): rank 0 serves a c10d TCPStore on loopback
// behind a front end on the address the user named (admission/store_front.h), which carries a
// connection to the store only after its peer proved the shared token. Each run of rank 0 draws
// a random run id; every record of the door is authenticated for its run, formation and rank
// (admission/door_records.h). A worker is admitted only after it proved the token over rank 0's fresh
// challenge and its settings match rank 0's; then the admitted ranks form their Gloo or NCCL group
// in the run's sealed view of the store (sealed_store.h), under a fresh prefix per formation
// ("generation"), so that a world can form again after a rank was lost, and every rank proves the
// token over the group itself before it carries anything (admission/membership.h).
//
// What the token does not do: the Gloo/NCCL connections are neither encrypted nor authenticated
// byte by byte; an eavesdropper on the network sees the data (see the docs).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "admission/door_records.h"
#include "admission/store_front.h"
#include "admission/token_file.h"
#include "dist/group.h"
#include "dist/world.h"

namespace c10d {
class Store;
class TCPStore;
}  // namespace c10d

namespace h3::dist {

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

// Rank 0's side. Logs admissions and refusals to stderr.
class DoorServer {
 public:
  // Serves the front end on opts.address (port 0: the system chooses; see port()) and the store
  // on loopback. Throws h3::Error(kDistributed) naming the address when it cannot listen there.
  explicit DoorServer(DoorOptions opts);
  ~DoorServer();  // tells waiting workers that rank 0 closed, and whether a world ever formed
  DoorServer(const DoorServer&) = delete;
  DoorServer& operator=(const DoorServer&) = delete;

  int port() const { return port_; }
  // Opens a new generation, admits ranks 1..N-1 within the timeout, forms the group with them
  // and has every rank prove the token over it. Throws h3::Error(kDistributed) naming the ranks
  // that never arrived, the refusals and the connections that failed the token check.
  std::unique_ptr<Group> form();

 private:
  DoorOptions opts_;
  door::RunKeys keys_;
  int port_ = 0;
  int64_t generation_ = 0;
  bool served_ = false;                // a world of this run formed
  int64_t wrong_proofs_reported_ = 0;  // the front end's count of wrong proofs when the last formation ended
  c10::intrusive_ptr<c10d::TCPStore> store_;
  std::unique_ptr<StoreFrontEnd> front_;  // after store_: it closes first
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
  // the token and settings, forms the group and proves the token over it. `wait`: how long to
  // wait for the door to open (0: as long as rank 0's store is there; a line on stderr every
  // minute says that it still waits). Returns nullptr once rank 0 closed: rank0_closed() then says
  // whether rank 0 ever formed a world. Throws h3::Error(kDistributed): refused (wrong token,
  // different settings: says what differs), rank 0 gone, or the door not opened within `wait`.
  std::unique_ptr<Group> join(std::chrono::milliseconds wait);

  // Once join() returned nullptr: whether a world of rank 0's run ever formed.
  bool rank0_served() const { return rank0_served_; }

  // Tells a closing rank 0 not to wait for this worker to read that it closed: rank 0 said stop
  // and the worker ends (never throws).
  void leave();

 private:
  DoorOptions opts_;
  int rank_;
  std::optional<door::RunKeys> run_;  // the run whose open record this client last verified
  int64_t joined_ = 0;                // the last generation of that run this client was admitted to
  bool rank0_served_ = false;
  std::unique_ptr<StoreTunnel> tunnel_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
};

}  // namespace h3::dist
