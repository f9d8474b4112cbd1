// Rank 0's store behind its front end: a client with the token gets through (by a worker's
// tunnel), anything else is refused before it reaches the store, and strangers by the hundred
// leave the front end's connections and memory bounded.
#include "dist/store_front.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "../../free_port.h"
#include "common/error.h"

namespace h3::dist {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

const std::string kToken = "the shared secret of these tests";

int listen_on_loopback(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(listen(fd, 512), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

// Reads until the peer closes or `bound` passes: the bytes read, and whether it closed.
std::pair<std::string, bool> read_until_closed(int fd, std::chrono::milliseconds bound) {
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + bound;
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return {got, true};
    got.append(buf, static_cast<size_t>(n));
  }
  return {got, false};
}

uint64_t rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
  }
  return 0;
}

// A store on loopback with a front end on another loopback port, as a DoorServer has them.
struct Rank0 {
  c10::intrusive_ptr<c10d::TCPStore> store;
  std::unique_ptr<StoreFrontEnd> front;
  int port = 0;

  explicit Rank0(FrontEndLimits limits) {
    c10d::TCPStoreOptions o;
    o.port = 0;
    o.isServer = true;
    o.waitWorkers = false;
    o.timeout = 20s;
    store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
    front = std::make_unique<StoreFrontEnd>(listen_on_loopback(&port), store->getPort(), kToken, limits);
  }
};

FrontEndLimits small_limits() {
  FrontEndLimits l;
  l.max_connections = 4;
  l.handshake = 500ms;
  l.liveness = 20s;
  return l;
}

c10::intrusive_ptr<c10d::TCPStore> client_through(const StoreTunnel& t) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(t.port());
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = 5s;
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
}

TEST(StoreFrontEnd, AWorkersTunnelWithTheTokenReachesTheStore) {
  Rank0 r0(small_limits());
  StoreTunnel tunnel("127.0.0.1", r0.port, kToken, 20s);
  auto client = client_through(tunnel);
  client->set("k", std::vector<uint8_t>{7, 8});
  EXPECT_EQ(r0.store->get("k"), (std::vector<uint8_t>{7, 8}));
  EXPECT_EQ(client->add("n", 5), 5);
  const FrontEndCounts c = r0.front->counts();
  EXPECT_GE(c.relayed, 1);
  EXPECT_EQ(c.wrong_proof, 0);
}

TEST(StoreFrontEnd, ATunnelWithAnotherTokenIsRefusedAndSaysWrongToken) {
  Rank0 r0(small_limits());
  StoreTunnel tunnel("127.0.0.1", r0.port, "another token of 16+ chars", 20s);
  EXPECT_ANY_THROW({
    auto client = client_through(tunnel);
    client->set("k", std::vector<uint8_t>{1});
  });
  EXPECT_THAT(tunnel.last_failure(), HasSubstr("wrong token"));
  EXPECT_GE(r0.front->counts().wrong_proof, 1);
  EXPECT_EQ(r0.front->counts().relayed, 0);
  EXPECT_FALSE(r0.store->check({"k"}));
}

TEST(StoreFrontEnd, AStrangersJunkIsReadFor48BytesThenClosedAndNeverReachesTheStore) {
  Rank0 r0(small_limits());
  const int64_t keys_before = r0.store->getNumKeys();
  const int fd = h3test_net::connect_loopback(r0.port);
  ASSERT_GE(fd, 0);
  std::string greeting(20, '\0');
  ASSERT_EQ(recv(fd, greeting.data(), greeting.size(), MSG_WAITALL), 20);
  EXPECT_EQ(greeting.substr(0, 4), "H3S1");
  // What a c10d client would send (a SET of 8 MiB) instead of the proof.
  const std::string junk(8 << 20, 'x');
  (void)!send(fd, junk.data(), junk.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  const auto [after, closed] = read_until_closed(fd, 5s);
  EXPECT_TRUE(closed);
  EXPECT_TRUE(after.empty()) << "the front end answered a wrong proof";
  close(fd);
  EXPECT_EQ(r0.front->counts().wrong_proof, 1);
  EXPECT_EQ(r0.store->getNumKeys(), keys_before);
  // The handshake's own check: the right 48 bytes for a greeting are accepted, others not.
  EXPECT_TRUE(store_proof_valid(kToken, greeting, store_proof(kToken, greeting, std::string(16, 'n'))));
  EXPECT_FALSE(store_proof_valid(kToken, greeting,
                                 store_proof("another token of 16+ chars", greeting, std::string(16, 'n'))));
  EXPECT_FALSE(store_proof_valid(kToken, greeting, junk.substr(0, 48)));
}

TEST(StoreFrontEnd, FourHundredIdleStrangersLeaveConnectionsAndMemoryBoundedAndAWorkerStillJoins) {
  Rank0 r0(small_limits());
  const uint64_t rss_before = rss_kib();
  std::vector<int> strangers;
  for (int i = 0; i < 400; ++i) {
    const int fd = h3test_net::connect_loopback(r0.port);
    if (fd >= 0) strangers.push_back(fd);
  }
  EXPECT_EQ(strangers.size(), 400u);
  // Each sends part of a frame and then nothing (a parked partial frame).
  for (int fd : strangers) (void)!send(fd, "H3", 2, MSG_NOSIGNAL | MSG_DONTWAIT);
  std::this_thread::sleep_for(200ms);
  FrontEndCounts c = r0.front->counts();
  EXPECT_LE(c.open_now, 4);
  EXPECT_GE(c.over_cap, 400 - 4 - 4);  // a few may have timed out and freed a place already
  // Past the handshake timeout, every stranger's connection is closed by the front end.
  int closed = 0;
  for (int fd : strangers) closed += read_until_closed(fd, 2s).second;
  for (int fd : strangers) close(fd);
  EXPECT_EQ(closed, 400);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (r0.front->counts().open_now > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  EXPECT_EQ(r0.front->counts().open_now, 0);
  EXPECT_LT(rss_kib(), rss_before + 32 * 1024) << "rank 0's memory grew with the strangers";

  StoreTunnel tunnel("127.0.0.1", r0.port, kToken, 20s);
  auto client = client_through(tunnel);
  client->set("after", std::vector<uint8_t>{1});
  EXPECT_EQ(r0.store->get("after"), std::vector<uint8_t>{1});  // get waits for the key
}

// Something at rank 0's address that greets like a front end and accepts any proof, but does not
// hold the token: its answer to the worker's challenge fails, and the tunnel carries nothing.
TEST(StoreTunnel, AnImpostorOfRankZeroIsFoundOutByItsAnswer) {
  int port = 0;
  const int listener = listen_on_loopback(&port);
  std::thread impostor([&] {
    const int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    const std::string greeting = "H3S1" + std::string(16, 'g');
    (void)!send(fd, greeting.data(), greeting.size(), MSG_NOSIGNAL);
    std::string reply(48, '\0');
    (void)!recv(fd, reply.data(), reply.size(), MSG_WAITALL);
    const std::string answer(32, 'a');  // not HMAC(token, "server" ...)
    (void)!send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
    read_until_closed(fd, 10s);
    close(fd);
  });
  StoreTunnel tunnel("127.0.0.1", port, kToken, 2s);
  EXPECT_ANY_THROW({
    auto client = client_through(tunnel);
    client->set("k", std::vector<uint8_t>{1});
  });
  EXPECT_THAT(tunnel.last_failure(), HasSubstr("is not rank 0 of this world"));
  shutdown(listener, SHUT_RDWR);
  impostor.join();
  close(listener);
}

TEST(StoreTunnel, AnotherProcessCannotBorrowAWorkersTunnel) {
  Rank0 r0(small_limits());
  StoreTunnel tunnel("127.0.0.1", r0.port, kToken, 20s);
  // Another process on this host connects to the tunnel's loopback port and sends a request.
  const std::string cmd = "timeout 10 bash -c 'exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(tunnel.port()) +
                          " && printf xxxx >&3 && head -c 1 <&3 | wc -c' 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char out[32] = {0};
  (void)!fgets(out, sizeof out, p);
  pclose(p);
  EXPECT_EQ(std::string(out), "0\n") << "the tunnel answered another process";
  EXPECT_EQ(r0.front->counts().accepted, 0) << "the tunnel carried another process's connection to rank 0";
}

}  // namespace
}  // namespace h3::dist
