// Two processes joined over a TCPStore on loopback: this test is rank 0 (the
// store server, on a port the system chooses) and dist_tcp_peer, built next
// to this binary, is rank 1.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "dist/world.h"
#include "h3/error.h"

extern char** environ;

namespace h3::dist {
namespace {

// dist_tcp_peer, as the build made it (tests/core/dist/meson.build).
std::string peer_path() {
  return H3_DIST_PEER;
}

class Peer {
 public:
  Peer(int port, const std::string& mode, int size = 2, int rank = 1) {
    std::string path = peer_path();
    std::string port_s = std::to_string(port);
    std::vector<std::string> args{path, "127.0.0.1", port_s, std::to_string(size), std::to_string(rank),
                                  mode};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, path.c_str(), nullptr, nullptr, argv.data(), environ) != 0) pid_ = -1;
  }
  ~Peer() {
    if (pid_ > 0 && !done_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool started() const { return pid_ > 0; }
  // The peer's exit status, or -1 if it did not exit within 60 s (then killed).
  int wait() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        done_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  bool done_ = false;
};

WorldOptions opts30() {
  WorldOptions o;
  o.timeout = std::chrono::seconds(30);
  return o;
}

// This process's mappings of a segment it made as rank 0 ("/dev/shm/h3-PID-..."), one line each.
std::vector<std::string> shared_segments() {
  std::ifstream maps("/proc/self/maps");
  const std::string mine = "/dev/shm/h3-" + std::to_string(getpid()) + "-";
  std::vector<std::string> found;
  for (std::string line; std::getline(maps, line);) {
    if (line.find(mine) != std::string::npos) found.push_back(line);
  }
  return found;
}

TEST(TcpWorld, TwoProcessesAllReduceAndAllGather) {
  TcpServer server("127.0.0.1", 0, 2, opts30());
  ASSERT_GT(server.port(), 0);
  Peer peer(server.port(), "collectives");
  ASSERT_TRUE(peer.started()) << peer_path();
  auto g = server.join();
  EXPECT_EQ(g->rank(), 0);
  EXPECT_EQ(g->size(), 2);
  EXPECT_STREQ(g->backend(), "gloo");
  // The processes share this host: their tensors travel through rank 0's shared segment
  // (dist/host_memory.h), mapped here and already unlinked, so nothing is left in /dev/shm.
  EXPECT_THAT(shared_segments(), ::testing::ElementsAre(::testing::HasSubstr(" (deleted)")));
  at::Tensor t = at::full({1000}, 1.0f);
  g->all_reduce(t);
  EXPECT_TRUE(at::equal(t, at::full({1000}, 3.0f)));
  auto all = g->all_gather(at::arange(0, at::kLong));  // rank 0 contributes nothing
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].numel(), 0);
  EXPECT_TRUE(at::equal(all[1], at::arange(5, at::kLong)));
  EXPECT_EQ(g->broadcast_string("hello from rank 0", 0), "hello from rank 0");
  g->barrier();
  g.reset();  // leaving the group waits for the peer to leave it too
  EXPECT_EQ(peer.wait(), 0);
}

TEST(TcpWorld, PeerProcessFailureReachesRank0) {
  TcpServer server("127.0.0.1", 0, 2, opts30());
  Peer peer(server.port(), "fail");
  ASSERT_TRUE(peer.started());
  auto g = server.join();
  at::Tensor t = at::ones({4});
  try {
    g->all_reduce(t);
    ADD_FAILURE() << "all_reduce returned although the peer left";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDistributed);
    EXPECT_STREQ(e.what(), "rank 1 failed: peer process 1 could not load its shard");
  }
  g.reset();
  EXPECT_EQ(peer.wait(), 0);
}

// A peer process killed while the others wait for it in a collective posts no failure: on one host
// the others see its process end (dist/host_memory.h; across hosts Gloo names only an address and
// the ranks' signs of life on the store say which rank is gone), on every rank that met the loss,
// and the rank that merely failed too (rank 1) is not blamed.
void kill_a_peer_mid_collective(const std::string& named) {
  TcpServer server("127.0.0.1", 0, 3, opts30());
  Peer survivor(server.port(), "outlive", 3, 1);
  Peer victim(server.port(), "die", 3, 2);
  ASSERT_TRUE(survivor.started() && victim.started());
  auto g = server.join();
  at::Tensor t = at::full({1000}, 1.0f);
  g->all_reduce(t);
  EXPECT_TRUE(at::equal(t, at::full({1000}, 6.0f)));
  try {
    g->all_gather(at::arange(0, at::kLong));
    ADD_FAILURE() << "all_gather returned although rank 2 was killed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDistributed);
    EXPECT_THAT(e.what(), ::testing::HasSubstr(named)) << e.what();
    EXPECT_THAT(e.what(), ::testing::Not(::testing::HasSubstr("rank 1 is gone"))) << e.what();
    std::printf("rank 0's error: %s\n", e.what());
  }
  g.reset();
  EXPECT_EQ(victim.wait(), 128 + SIGKILL);
  EXPECT_EQ(survivor.wait(), 3) << "rank 1's all_gather did not fail naming rank 2 (its stderr says why)";
}

TEST(TcpWorld, APeerProcessKilledMidCollectiveIsNamedAsGoneByEveryOtherRank) {
  kill_a_peer_mid_collective(
      "rank 2 is gone: its process ended (killed or crashed) while this rank waited for it; start it again");
}

// The same over Gloo's transport (H3_DIST_SHM=0 in rank 0's environment: no shared segment), as
// ranks on different hosts meet it: the signs of life name the rank.
TEST(TcpWorld, APeerProcessKilledMidGlooCollectiveIsNamedBySignsOfLife) {
  setenv("H3_DIST_SHM", "0", 1);
  kill_a_peer_mid_collective(
      "rank 2 is gone: it showed no sign of life for 2000 ms and neither failed nor left on its own (its "
      "process was killed or crashed, or its host or the network to it went down); start it again");
  unsetenv("H3_DIST_SHM");
}

TEST(TcpWorld, RejectsBadArguments) {
  EXPECT_THROW(join_tcp("127.0.0.1", 0, 2, 1), Error);      // a client needs the server's port
  EXPECT_THROW(join_tcp("127.0.0.1", 5000, 2, 2), Error);   // rank outside the world
  EXPECT_THROW(join_tcp("127.0.0.1", 70000, 2, 1), Error);  // not a port
  EXPECT_THROW(TcpServer("127.0.0.1", -1, 2), Error);
}

}  // namespace
}  // namespace h3::dist
