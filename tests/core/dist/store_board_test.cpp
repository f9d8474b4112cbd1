// The store board's records (dist/store_board.h) when they are not what a rank writes: each
// malformed failure record is still its rank's failure, with a message that says what is wrong
// with it, and a malformed or unauthenticated sign of life ends an owner wait at once with the
// reason, instead of being waited on as "no sign of life".
#include "dist/store_board.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "admission/sealed_store.h"
#include "dist/world.h"
#include "dist_test_util.h"
#include "h3/error.h"
#include "spy_store.h"

namespace h3::dist {
namespace {

using ::testing::HasSubstr;

std::vector<uint8_t> bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

TEST(StoreBoard, EachMalformedFailureRecordIsItsRanksFailureSayingWhatIsWrong) {
  struct Case {
    std::string value, says;
  };
  const std::vector<Case> cases = {
      {"", "(it is empty)"},
      {"12 collectives, then a fault",
       "(it has no line with the count of collectives the rank completed): "
       "'12 collectives, then a fault'"},
      {"\nno count", "(the count of collectives is empty): '?no count'"},
      {"-3\nnegative", "(the count of collectives is not a decimal number): '-3?negative'"},
      {"0x1f\nhex", "(the count of collectives is not a decimal number): '0x1f?hex'"},
      {"9223372036854775808\none past the largest int64",
       "(the count of collectives is larger than a 64-bit count): '9223372036854775808?one past the "
       "largest...'"},
      {std::string(25, '7') + "\ntoo many digits",
       "(the count of collectives is larger than a 64-bit count)"},
      {std::string("\x01\xff") + "\nbinary",
       "(the count of collectives is not a decimal number): '???binary'"},
  };
  for (const Case& c : cases) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    store->set("h3/failure/1", bytes(c.value));
    const std::optional<PeerFailure> f = store_read_failure(*store, 3);
    ASSERT_TRUE(f) << "a malformed record was ignored: '" << c.value << "'";
    EXPECT_EQ(f->rank, 1);
    EXPECT_EQ(f->completed, 0);
    EXPECT_THAT(f->message, HasSubstr("its failure record on the store board is malformed " + c.says))
        << "'" << c.value << "'";
  }
  // A well-formed record beside a malformed one: the malformed one (completed 0) is the cause.
  auto store = c10::make_intrusive<c10d::HashStore>();
  store_post_failure(*store, PeerFailure{0, "rank 0's own failure", 5});
  store->set("h3/failure/2", bytes("junk"));
  const std::optional<PeerFailure> f = store_read_failure(*store, 3);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, 2);
  // The largest count there is still reads.
  store->set("h3/failure/2", bytes("9223372036854775807\nthe largest"));
  EXPECT_EQ(store_read_failure(*store, 3)->completed, 5);
}

TEST(StoreBoard, AFailureRecordThatFailsTheSealedStoresAuthenticationIsRefusedSayingSo) {
  auto spy = c10::make_intrusive<testing::SpyStore>();
  auto sealed = make_sealed_store(spy, "the token of these board tests", "run");
  store_post_failure(*sealed, PeerFailure{1, "a real failure", 3});
  std::vector<uint8_t> v = spy->get(spy->last);
  v.back() ^= 1;  // the tag
  spy->c10d::HashStore::set(spy->last, v);
  const std::optional<PeerFailure> f = store_read_failure(*sealed, 2);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, 1);
  EXPECT_THAT(f->message, HasSubstr("its failure record on the store board is malformed (sealed store: the "
                                    "value of 'h3/failure/1' fails authentication"));
}

TEST(StoreBoard, AMalformedSignOfLifeIsRefusedNamingItsValue) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  EXPECT_EQ(store_owner_alive_count(*store), 0);  // none yet
  store_owner_alive(*store, 41);
  EXPECT_EQ(store_owner_alive_count(*store), 41);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "(its count is empty): ''"},
      {"12x", "(its count is not a decimal number): '12x'"},
      {"99999999999999999999", "(its count is larger than a 64-bit count): '99999999999999999999'"},
  };
  for (const auto& [value, says] : cases) {
    store->set("h3/owner_alive", bytes(value));
    try {
      store_owner_alive_count(*store);
      ADD_FAILURE() << "'" << value << "' was taken for a count";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kDistributed);
      EXPECT_THAT(e.what(), HasSubstr("the owner's sign of life on the store board is malformed " + says));
    }
  }
}

// Two Gloo thread ranks on a store this test can write to: while rank 0 (the owner) runs its
// work, its sign of life is overwritten with junk; rank 1 fails its wait with the reason (and
// posts it), instead of waiting on it as no sign of life.
TEST(StoreBoard, AnOwnerWaitMeetingAMalformedSignOfLifeFailsAtOnceWithTheReason) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  WorldOptions o;
  o.timeout = std::chrono::seconds(30);
  o.thread_transport = ThreadTransport::kGloo;
  testing::Latch peer_failed;
  std::string peer_error;
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      std::unique_ptr<Group> g = make_store_group(store, rank, 2, o, "127.0.0.1");
      try {
        g->run_on_owner(
            0,
            [&] {
              // Junk over and over (the owner's heartbeat writes real marks between), until the
              // peer has given up, or a bound that only keeps a broken build from hanging.
              const auto bound = std::chrono::steady_clock::now() + std::chrono::seconds(20);
              do {
                store->set("h3/owner_alive", bytes("not a count"));
              } while (!peer_failed.wait_for(1, std::chrono::seconds(0)) &&
                       std::chrono::steady_clock::now() < bound);
            },
            "a sink whose heartbeat is forged");
      } catch (const Error& e) {
        if (rank == 1) peer_error = e.what();
        if (rank == 1) peer_failed.arrive();
      }
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_THAT(peer_error,
              HasSubstr("rank 1: a sink whose heartbeat is forged: the owner's sign of life on the "
                        "store board is malformed (its count is not a decimal number): "
                        "'not a count'"));
  // Posted: the owner's side reads rank 1's failure, with the same reason.
  const std::optional<PeerFailure> f = store_read_failure(*store, 2);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, 1);
  EXPECT_THAT(f->message, HasSubstr("the owner's sign of life on the store board is malformed"));
}

// Signs of life (a world of processes): among rank 0's peers, the one that beats is alive, the one
// that departed and the one that posted its failure left on their own, and only the one that did
// none of these (a killed process) is gone; once every peer showed a sign, nobody is.
TEST(StoreBoard, OnlyAPeerThatNeitherBeatsNorLeftNorFailedIsGone) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const RankPulse beating(store, 1, std::chrono::milliseconds(10));
  store_depart(*store, 3, 5, std::chrono::milliseconds(0));
  store_post_failure(*store, PeerFailure{4, "rank 4 could not load its shard", 0});
  EXPECT_EQ(store_gone_ranks(*store, 0, 5, kRankGoneWindow, std::chrono::milliseconds(10)),
            std::vector<int>{2});
  // Rank 2 beats too, from now on: no peer is gone.
  const RankPulse late(store, 2, std::chrono::milliseconds(10));
  EXPECT_EQ(store_gone_ranks(*store, 0, 5, kRankGoneWindow, std::chrono::milliseconds(10)),
            std::vector<int>{});
}

}  // namespace
}  // namespace h3::dist
