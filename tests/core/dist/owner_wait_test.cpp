// Group::run_on_owner: peers wait for rank 0 while it runs the caller's code
// (a chunk sink blocked by a slow consumer) for longer than the collective
// timeout, as long as it is alive; a rank 0 that never comes is an error
// naming it; a posted failure ends the wait. Every rank's outcome is checked.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "dist/world.h"
#include "dist_test_util.h"
#include "h3/error.h"

namespace h3::dist {
namespace {

class RunOnOwner : public ::testing::TestWithParam<ThreadTransport> {
 protected:
  WorldOptions timeout_ms(int ms) const {
    WorldOptions o;
    o.timeout = std::chrono::milliseconds(ms);
    o.thread_transport = GetParam();
    return o;
  }
};

TEST_P(RunOnOwner, WorkFourTimesTheTimeoutLeavesEveryRankWorking) {
  std::atomic<int> ran{0};
  std::atomic<bool> work_done{false};
  testing::run_ok(
      3,
      [&](Group& g) {
        g.run_on_owner(
            0,
            [&] {
              ran += 1;
              // The slow sink: four collective timeouts.
              std::this_thread::sleep_for(std::chrono::milliseconds(1200));
              work_done = true;
            },
            "a slow sink");
        // Every rank left the wait after the owner's work had finished, none before.
        EXPECT_TRUE(work_done.load()) << "rank " << g.rank() << " left before the owner's work ended";
        EXPECT_FALSE(g.broken());
        EXPECT_EQ(g.all_reduce_int(1), 3);
      },
      timeout_ms(300));
  EXPECT_EQ(ran.load(), 1);  // on the owner only
}

TEST_P(RunOnOwner, ManyShortWaitsInARowStayInStep) {
  testing::run_ok(
      2,
      [](Group& g) {
        int64_t sum = 0;
        for (int i = 0; i < 50; ++i) {
          int64_t v = 0;
          g.run_on_owner(
              0, [&] { v = i; }, "step");
          sum += g.broadcast_int(v, 0);
        }
        EXPECT_EQ(sum, 49 * 50 / 2);
      },
      timeout_ms(2000));
}

TEST_P(RunOnOwner, WhatTheWorkThrowsReachesTheOwnerAndThePeersGoOn) {
  testing::run_ok(
      2,
      [](Group& g) {
        try {
          g.run_on_owner(
              0, [] { throw Error(ErrorKind::kCallback, "the sink refused"); }, "a sink");
          EXPECT_NE(g.rank(), 0) << "the owner's exception was lost";
        } catch (const Error& e) {
          EXPECT_EQ(g.rank(), 0);
          EXPECT_EQ(e.kind(), ErrorKind::kCallback);
        }
        EXPECT_EQ(g.all_reduce_int(1), 2);
      },
      timeout_ms(2000));
}

TEST_P(RunOnOwner, AnOwnerThatNeverComesIsAnErrorNamingItOnEveryRank) {
  testing::Latch peer_gave_up;
  auto results = run_threads(
      2,
      [&peer_gave_up](Group& g) {
        if (g.rank() == 0) {
          // Never runs the work: comes to the next collective only after rank 1 gave up.
          EXPECT_TRUE(peer_gave_up.wait_for(1)) << "rank 1 waited for ever";
          g.barrier();
          return;
        }
        try {
          g.run_on_owner(
              0, [] {}, "waiting for rank 0 to hand a chunk to its sink");
          ADD_FAILURE() << "rank 1 went on without rank 0";
        } catch (...) {
          peer_gave_up.arrive();
          throw;
        }
      },
      timeout_ms(300));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_FALSE(results[1].ok);
  EXPECT_NE(results[1].error.find("rank 1: waiting for rank 0 to hand a chunk to its sink timed out after "
                                  "300 ms: rank 0 showed no sign of life"),
            std::string::npos)
      << results[1].error;
  // Rank 0 learns it from the board at its next collective instead of waiting there.
  EXPECT_FALSE(results[0].ok);
  EXPECT_NE(results[0].error.find("rank 1 failed"), std::string::npos) << results[0].error;
}

TEST_P(RunOnOwner, AFailurePostedByAnotherRankEndsTheWait) {
  testing::Latch work_started, waiter_released;
  std::atomic<bool> released_while_working{false};
  auto results = run_threads(
      3,
      [&](Group& g) {
        if (g.rank() == 2) {
          // Fails while the owner works and rank 1 waits for it.
          EXPECT_TRUE(work_started.wait_for(1)) << "the owner never started its work";
          throw Error(ErrorKind::kInternal, "rank 2 broke");
        }
        try {
          // The owner's work ends only once rank 1's wait has ended: what ended it was
          // rank 2's failure, not the owner finishing.
          g.run_on_owner(
              0,
              [&] {
                work_started.arrive();
                released_while_working = waiter_released.wait_for(1);
              },
              "a slow sink");
        } catch (...) {
          if (g.rank() == 1) waiter_released.arrive();
          throw;
        }
        g.barrier();
      },
      timeout_ms(10000));
  EXPECT_TRUE(released_while_working.load()) << "rank 1 waited for the owner despite rank 2's failure";
  ASSERT_EQ(results.size(), 3u);
  EXPECT_FALSE(results[2].ok);
  for (int r : {0, 1}) {
    EXPECT_FALSE(results[r].ok) << "rank " << r;
    EXPECT_NE(results[r].error.find("rank 2 failed: rank 2 broke"), std::string::npos)
        << "rank " << r << ": " << results[r].error;
  }
}

TEST(RunOnOwnerSingle, AtSizeOneItJustRunsTheWork) {
  auto g = make_single_group();
  int ran = 0;
  g->run_on_owner(
      0, [&] { ++ran; }, "local");
  EXPECT_EQ(ran, 1);
}

TEST_P(RunOnOwner, AnOwnerOutsideTheGroupIsRefusedOnEveryRank) {
  auto results = run_threads(
      2,
      [](Group& g) {
        g.run_on_owner(
            2, [] {}, "x");
      },
      timeout_ms(60000));
  for (const auto& r : results) {
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("owner rank 2 is not in the group of 2"), std::string::npos) << r.error;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, RunOnOwner, testing::thread_transports(), testing::transport_name);

}  // namespace
}  // namespace h3::dist
