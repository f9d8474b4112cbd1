// A process world's door whole (admission/door.h), rank 0 and a worker as two threads of this test:
// a crowd of silent connections, renewed as fast as the door closes them, cannot keep a worker
// out; a door that is truly full for the worker's address ends its wait with what it met; a link
// to rank 0 that breaks without a reset is reported as such; and rank 0's store on loopback
// takes no connection but its front end's.
#include "admission/door.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../../free_port.h"
#include "admission/proc_sockets.h"
#include "h3/error.h"
#include "tcp_relay.h"
#include "tools/process_memory.h"

namespace h3::dist {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

const std::string kToken = "the shared secret of the door tests";

DoorOptions options(int port, std::chrono::milliseconds timeout) {
  DoorOptions o;
  o.address = Address{"127.0.0.1", port};
  o.world_size = 2;
  o.token = kToken;
  o.settings = "{\"model\":\"the same\"}";
  o.world.timeout = timeout;
  return o;
}

// Connections that send nothing, from given loopback addresses, each opened again as soon as
// the door closes it (or turns it away): the attack of issue 48, renewed at once rather than
// every 10 s.
class SilentCrowd {
 public:
  SilentCrowd(int port, const std::vector<std::string>& sources) : port_(port), sources_(sources) {
    fds_.assign(sources_.size(), -1);
    for (size_t i = 0; i < sources_.size(); ++i)
      fds_[i] = h3test_net::start_connect(sources_[i], "127.0.0.1", port_);
    thread_ = std::thread([this] { renew(); });
  }
  ~SilentCrowd() {
    stop_ = true;
    thread_.join();
    for (int fd : fds_) close(fd);
  }
  int64_t renewed() const { return renewed_; }

 private:
  int port_;
  std::vector<std::string> sources_;
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> renewed_{0};
  std::thread thread_;

  void renew() {
    char buf[64];
    while (!stop_) {
      std::vector<pollfd> p;
      for (int fd : fds_) p.push_back({fd, POLLIN, 0});
      if (poll(p.data(), p.size(), 20) <= 0) continue;
      for (size_t i = 0; i < p.size(); ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        if (recv(fds_[i], buf, sizeof buf, MSG_DONTWAIT) > 0) continue;  // a greeting: stays silent
        close(fds_[i]);                                                  // closed by the door, or turned away
        fds_[i] = h3test_net::start_connect(sources_[i], "127.0.0.1", port_);
        ++renewed_;
      }
      std::this_thread::sleep_for(1ms);
    }
  }
};

// Rank 0 forms the world and the worker joins it, each on its own thread; both then sum over
// the group. Returns the worker's error ("" when it joined).
std::string form_and_join(DoorServer& rank0, const DoorOptions& worker_opts) {
  std::string rank0_error, worker_error;
  int64_t rank0_sum = 0, worker_sum = 0;
  std::thread r0([&] {
    try {
      std::unique_ptr<Group> g = rank0.form();
      rank0_sum = g->all_reduce_int(1);
    } catch (const std::exception& e) {
      rank0_error = e.what();
    }
  });
  try {
    DoorClient client(worker_opts, 1);
    std::unique_ptr<Group> g = client.join(worker_opts.world.timeout);
    worker_sum = g->all_reduce_int(1);
  } catch (const std::exception& e) {
    worker_error = e.what();
  }
  r0.join();
  if (worker_error.empty()) {
    EXPECT_EQ(rank0_error, "");
    EXPECT_EQ(rank0_sum, 2);
    EXPECT_EQ(worker_sum, 2);
  }
  return worker_error;
}

TEST(Door, SilentConnectionsRenewedFromManyAddressesCannotKeepAWorkerFromJoining) {
  DoorServer rank0(options(0, 20s));
  // 2 x world-size - 1 from one address (the attack that locked every worker out: the door had
  // 2 x world-size places in all), and two from each of ten more addresses, each renewed as soon
  // as the door closes or turns it away.
  std::vector<std::string> sources(3, "127.0.0.2");
  for (int a = 3; a < 13; ++a) sources.insert(sources.end(), 2, "127.0.0." + std::to_string(a));
  SilentCrowd crowd(rank0.port(), sources);
  std::this_thread::sleep_for(1s);  // the crowd holds every place, settled
  EXPECT_EQ(form_and_join(rank0, options(rank0.port(), 20s)), "");
  std::printf("the crowd renewed %lld connections meanwhile\n", static_cast<long long>(crowd.renewed()));
}

// Two silent connections from the worker's own address hold that address's share of the door
// for 3 s (the handshake deadline); the worker waits 2 s: it asks again until then and says
// what it met.
TEST(Door, AWorkerThatFindsTheDoorFullForItsAddressSaysWhatItMet) {
  DoorServer rank0(options(0, 60s));
  const int s1 = h3test_net::connect_loopback(rank0.port()), s2 = h3test_net::connect_loopback(rank0.port());
  ASSERT_GE(s1, 0);
  ASSERT_GE(s2, 0);
  std::string why;
  try {
    DoorClient client(options(rank0.port(), 2s), 1);
    ADD_FAILURE() << "the worker got a place its address did not have";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDistributed);
    why = e.what();
  }
  EXPECT_THAT(why, HasSubstr("rank 1: rank 0's door at 127.0.0.1:" + std::to_string(rank0.port()) +
                             " had no place for this worker's connection in 2.0 s ("));
  EXPECT_THAT(why, HasSubstr("the last time as many connections from this host's address as rank 0 allows "
                             "were still proving the token"));
  close(s1);
  close(s2);
}

// The worker reaches rank 0 through a relay that then drops everything from the worker's side
// (a cable pulled: no reset, no FIN). The worker's next look at rank 0's store fails once the
// link was silent for half its timeout, saying what happened.
TEST(Door, ALinkThatBreaksWithoutAResetIsReportedAsNoReplyFromRankZero) {
  DoorServer rank0(options(0, 20s));
  h3test_relay::TcpRelay relay(rank0.port(), {});
  DoorClient client(options(relay.port(), 4s), 1);
  relay.black_hole();
  std::string why;
  try {
    client.join(30s);
    ADD_FAILURE() << "join returned over a broken link";
  } catch (const Error& e) {
    why = e.what();
  }
  EXPECT_EQ(why, "rank 1: lost rank 0's store at 127.0.0.1:" + std::to_string(relay.port()) +
                     ": no reply from rank 0 at 127.0.0.1:" + std::to_string(relay.port()) +
                     " for 2.0 s: the network between this host and rank 0's broke, or rank 0 stopped");
}

std::set<int> listening_ports() {
  std::set<int> out;
  for (const ListeningSocket& l : listening_sockets()) out.insert(l.port);
  return out;
}

// Rank 0's store listens on an ephemeral loopback port that every local user can find. None of
// them gets a connection to it: a crowd of 200 and the first bytes of a 512 MiB flood go
// nowhere, rank 0's memory does not grow with them, and a worker still joins.
TEST(Door, RankZerosStoreOnLoopbackTakesNoConnectionButItsFrontEnds) {
  const std::set<int> before = listening_ports();
  DoorServer rank0(options(0, 20s));
  std::vector<int> store_ports;
  for (int p : listening_ports()) {
    if (!before.count(p) && p != rank0.port()) store_ports.push_back(p);
  }
  ASSERT_EQ(store_ports.size(), 1u) << "rank 0 listens on more than its door and its store";
  const int store_port = store_ports[0];
  const double rss_before = tools::status_mib("VmRSS:");
  std::vector<int> tries;
  for (int i = 0; i < 200; ++i)
    tries.push_back(h3test_net::start_connect("127.0.0.1", "127.0.0.1", store_port));
  std::this_thread::sleep_for(1500ms);  // their SYNs have arrived, and been dropped, by now
  const int connected = h3test_net::count_connected_and_close(tries);
  EXPECT_EQ(connected, 0) << "local strangers connected to rank 0's store";
  // The flood: 512 MiB, had the connection opened; it does not.
  const int flood = h3test_net::connect_from("127.0.0.1", "127.0.0.1", store_port, 1000);
  EXPECT_EQ(flood, -1);
  size_t sent = 0;
  if (flood >= 0) {
    const std::string chunk(1 << 20, 'x');
    for (int i = 0; i < 512; ++i) {
      const ssize_t n = send(flood, chunk.data(), chunk.size(), MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    close(flood);
  }
  const double rss_after = tools::status_mib("VmRSS:");
  std::printf(
      "rank 0's RSS: %.1f MiB before 200 strangers and a flood at its store, %.1f MiB after (%zu bytes "
      "of the flood sent)\n",
      rss_before, rss_after, sent);
  EXPECT_EQ(form_and_join(rank0, options(rank0.port(), 20s)), "");
}

}  // namespace
}  // namespace h3::dist
