// Group::run_on_owner: peers wait for rank 0 while it runs the caller's code
// (a chunk sink blocked by a slow consumer) for longer than the collective
// timeout, as long as it is alive; a rank 0 that never comes is an error
// naming it; a posted failure ends the wait. Every rank's outcome is checked.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "common/error.h"
#include "dist/world.h"
#include "test_util.h"

namespace h3::dist {
namespace {

using Clock = std::chrono::steady_clock;

WorldOptions timeout_ms(int ms) {
  WorldOptions o;
  o.timeout = std::chrono::milliseconds(ms);
  return o;
}

int64_t ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

TEST(RunOnOwner, WorkFourTimesTheTimeoutLeavesEveryRankWorking) {
  std::atomic<int> ran{0};
  testing::run_ok(
      3,
      [&](Group& g) {
        const auto start = Clock::now();
        g.run_on_owner(
            0,
            [&] {
              ran += 1;
              std::this_thread::sleep_for(std::chrono::milliseconds(1200));
            },
            "a slow sink");
        // Every rank left the wait after the owner's work, none before.
        EXPECT_GE(ms_since(start), 1100) << "rank " << g.rank();
        EXPECT_FALSE(g.broken());
        EXPECT_EQ(g.all_reduce_int(1), 3);
      },
      timeout_ms(300));
  EXPECT_EQ(ran.load(), 1);  // on the owner only
}

TEST(RunOnOwner, ManyShortWaitsInARowStayInStep) {
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

TEST(RunOnOwner, WhatTheWorkThrowsReachesTheOwnerAndThePeersGoOn) {
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

TEST(RunOnOwner, AnOwnerThatNeverComesIsAnErrorNamingItOnEveryRank) {
  auto results = run_threads(
      2,
      [](Group& g) {
        if (g.rank() == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // never runs the work
          g.barrier();
          return;
        }
        g.run_on_owner(
            0, [] {}, "waiting for rank 0 to hand a chunk to its sink");
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

TEST(RunOnOwner, AFailurePostedByAnotherRankEndsTheWait) {
  auto results = run_threads(
      3,
      [](Group& g) {
        if (g.rank() == 2) throw Error(ErrorKind::kInternal, "rank 2 broke");
        // The owner works longer than anyone would wait for a failed rank.
        g.run_on_owner(
            0, [] { std::this_thread::sleep_for(std::chrono::milliseconds(1500)); }, "a slow sink");
        g.barrier();
      },
      timeout_ms(10000));
  ASSERT_EQ(results.size(), 3u);
  EXPECT_FALSE(results[2].ok);
  for (int r : {0, 1}) {
    EXPECT_FALSE(results[r].ok) << "rank " << r;
    EXPECT_NE(results[r].error.find("rank 2 failed: rank 2 broke"), std::string::npos)
        << "rank " << r << ": " << results[r].error;
  }
}

TEST(RunOnOwner, AtSizeOneItJustRunsTheWork) {
  auto g = make_single_group();
  int ran = 0;
  g->run_on_owner(
      0, [&] { ++ran; }, "local");
  EXPECT_EQ(ran, 1);
}

TEST(RunOnOwner, AnOwnerOutsideTheGroupIsRefusedOnEveryRank) {
  auto results = run_threads(2, [](Group& g) {
    g.run_on_owner(
        2, [] {}, "x");
  });
  for (const auto& r : results) {
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("owner rank 2 is not in the group of 2"), std::string::npos) << r.error;
  }
}

}  // namespace
}  // namespace h3::dist
