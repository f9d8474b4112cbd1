// The filter that keeps strangers off Gloo's listener (admission/listener_filter.h), on loopback: the
// whole of 127.0.0.0/8 reaches this host, so a client bound to 127.0.0.2 is a stranger to a
// listener that admits 127.0.0.1 only.
#include "admission/listener_filter.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "../../free_port.h"
#include "h3/error.h"

namespace h3::dist {
namespace {

using h3test_net::connect_from;
using h3test_net::connects;
using h3test_net::endpoint;
using h3test_net::length;

// A listener on `ip`, port chosen by the kernel: {fd, port}.
std::pair<int, int> listen_on(const std::string& ip) {
  sockaddr_storage ss = endpoint(ip, 0);
  const int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  if (ss.ss_family == AF_INET6) {
    const int off = 0;  // dual stack: IPv4 clients arrive as IPv4 packets
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
  }
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&ss), length(ss)), 0) << ip;
  EXPECT_EQ(listen(fd, 64), 0);
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  const int port = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in&>(ss).sin_port
                                                 : reinterpret_cast<sockaddr_in6&>(ss).sin6_port);
  return {fd, port};
}

TEST(ListenerFilter, AddressesParsePrintAndMapIpv4InIpv6ToIpv4) {
  EXPECT_EQ(parse_ip("10.0.0.2").str(), "10.0.0.2");
  EXPECT_EQ(parse_ip("10.0.0.2").family, AF_INET);
  EXPECT_EQ(parse_ip("fd00::1").str(), "fd00::1");
  EXPECT_EQ(parse_ip("fd00::1").family, AF_INET6);
  EXPECT_EQ(parse_ip("::ffff:10.0.0.2"), parse_ip("10.0.0.2"));
  try {
    parse_ip("rank0.example");
    FAIL() << "a host name is not an address";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'rank0.example' is not an IPv4 or IPv6 address"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(source_address_towards(parse_ip("127.0.0.1")), parse_ip("127.0.0.1"));
}

// The entry listening_sockets() gives for descriptor `fd`; a default one (fd -1) if none.
ListeningSocket listener_of(int fd) {
  for (const ListeningSocket& l : listening_sockets())
    if (l.fd == fd) return l;
  return {};
}

TEST(ListenerFilter, ListeningSocketsFindsANewListenerByItsDescriptorWithItsAddressAndPort) {
  const auto [fd, port] = listen_on("127.0.0.1");
  const ListeningSocket l = listener_of(fd);
  EXPECT_EQ(l.fd, fd);
  EXPECT_GT(l.inode, 0u);
  EXPECT_EQ(l.address, parse_ip("127.0.0.1"));
  EXPECT_EQ(l.port, port);
  const auto [fd6, port6] = listen_on("::1");
  EXPECT_EQ(listener_of(fd6).address, parse_ip("::1"));
  EXPECT_EQ(listener_of(fd6).port, port6);
  close(fd6);
  close(fd);
  const auto after = listening_sockets();
  EXPECT_FALSE(std::any_of(after.begin(), after.end(), [&](const ListeningSocket& l) { return l.fd == fd; }));
}

TEST(ListenerFilter, AnIpv4ListenerAdmitsItsMembersOnly) {
  const auto [fd, port] = listen_on("127.0.0.1");
  EXPECT_TRUE(connects("127.0.0.2", "127.0.0.1", port)) << "reachable before the filter";
  admit_only(fd, {parse_ip("127.0.0.1"), parse_ip("127.0.0.3")});
  EXPECT_TRUE(connects("127.0.0.1", "127.0.0.1", port));
  EXPECT_TRUE(connects("127.0.0.3", "127.0.0.1", port));
  EXPECT_FALSE(connects("127.0.0.2", "127.0.0.1", port)) << "a stranger's SYN is dropped";
  close(fd);
}

TEST(ListenerFilter, ADualStackListenerChecksIpv4AndIpv6SourcesEachAgainstTheirOwnFamily) {
  const auto [fd, port] = listen_on("::");
  ASSERT_TRUE(connects("::1", "::1", port));
  admit_only(fd, {parse_ip("127.0.0.2"), parse_ip("fd00::7")});
  EXPECT_TRUE(connects("127.0.0.2", "127.0.0.1", port)) << "an IPv4 member through the IPv6 listener";
  EXPECT_FALSE(connects("127.0.0.1", "127.0.0.1", port));
  EXPECT_FALSE(connects("::1", "::1", port)) << "::1 is not a member";
  close(fd);
  const auto [fd6, port6] = listen_on("::1");
  admit_only(fd6, {parse_ip("::1")});
  EXPECT_TRUE(connects("::1", "::1", port6));
  close(fd6);
}

TEST(ListenerFilter, AFilterWithNoMembersAdmitsNobody) {
  const auto [fd, port] = listen_on("127.0.0.1");
  admit_only(fd, {});
  EXPECT_FALSE(connects("127.0.0.1", "127.0.0.1", port));
  close(fd);
}

TEST(ListenerFilter, ConnectionsTakenBeforeTheFilterFromStrangersAreShutOutAndMembersKept) {
  const auto [fd, port] = listen_on("127.0.0.1");
  const int stranger = connect_from("127.0.0.2", "127.0.0.1", port);
  const int member = connect_from("127.0.0.1", "127.0.0.1", port);
  const int queued = connect_from("127.0.0.4", "127.0.0.1", port);  // still in the accept queue
  ASSERT_GE(stranger, 0);
  ASSERT_GE(member, 0);
  ASSERT_GE(queued, 0);
  const int accepted_stranger = accept(fd, nullptr, nullptr), accepted_member = accept(fd, nullptr, nullptr);
  ASSERT_GE(accepted_stranger, 0);
  ASSERT_GE(accepted_member, 0);
  admit_only(fd, {parse_ip("127.0.0.1")});
  try {
    shut_out_strangers(listener_of(fd), {parse_ip("127.0.0.1")}, 200);
    FAIL() << "a stranger left in the accept queue must fail the call";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("was still not accepted after 200 ms"), std::string::npos)
        << e.what();
  }
  char byte = 0;
  pollfd p{stranger, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 2000), 1);
  EXPECT_EQ(read(stranger, &byte, 1), 0) << "the accepted stranger's connection ended all the same";
  const int accepted_queued = accept(fd, nullptr, nullptr);
  ASSERT_GE(accepted_queued, 0);
  EXPECT_EQ(shut_out_strangers(listener_of(fd), {parse_ip("127.0.0.1")}, 200), 1) << "the one accepted since";
  pollfd q{queued, POLLIN, 0};
  ASSERT_EQ(poll(&q, 1, 2000), 1);
  EXPECT_EQ(read(queued, &byte, 1), 0);
  EXPECT_EQ(write(member, "x", 1), 1);
  EXPECT_EQ(read(accepted_member, &byte, 1), 1) << "the member's connection is untouched";
  EXPECT_EQ(byte, 'x');
  for (int f : {stranger, member, queued, accepted_stranger, accepted_member, accepted_queued, fd}) close(f);
}

}  // namespace
}  // namespace h3::dist
