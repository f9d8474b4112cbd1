// The hang cases of the reference implementation, asserted on every rank:
// a rank-local owner check, a rank failing before a collective, and a
// cancel raised on one rank only.
#include "dist/agree.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "dist/world.h"
#include "dist_test_util.h"
#include "h3/error.h"

namespace h3::dist {
namespace {

using testing::run_ok;

// What each rank saw of agree_owner, then whether it went on to the
// "decoder" collective (which a rank-local check would enter alone).
std::vector<RankResult> run_owner(int size, int supplier_mask) {
  return run_threads(size, [supplier_mask](Group& g) {
    agree_owner(g, (supplier_mask >> g.rank()) & 1);
    at::Tensor t = at::ones({2});
    g.all_reduce(t);  // the decoder's collective
  });
}

void expect_same_error_on_every_rank(const std::vector<RankResult>& results, ErrorKind kind,
                                     const std::string& fragment) {
  for (const auto& r : results) {
    ASSERT_FALSE(r.ok) << "rank " << r.rank << " went on alone";
    EXPECT_EQ(r.error, results[0].error) << "rank " << r.rank;
    EXPECT_NE(r.error.find(fragment), std::string::npos) << "rank " << r.rank << ": " << r.error;
    try {
      std::rethrow_exception(r.exception);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << "rank " << r.rank;
    } catch (...) {
      ADD_FAILURE() << "rank " << r.rank << " threw something other than h3::Error";
    }
  }
}

TEST(AgreeOwner, ConsumerOnRank1Of3IsTheSameErrorOnEveryRank) {
  auto results = run_owner(3, 0b010);
  ASSERT_EQ(results.size(), 3u);
  expect_same_error_on_every_rank(results, ErrorKind::kInvalidArgument, "supplied on rank 1");
}

TEST(AgreeOwner, NoOwnerIsTheSameErrorOnEveryRank) {
  expect_same_error_on_every_rank(run_owner(3, 0), ErrorKind::kInvalidArgument, "no rank supplies");
}

TEST(AgreeOwner, TwoOwnersIsTheSameErrorOnEveryRank) {
  expect_same_error_on_every_rank(run_owner(4, 0b1001), ErrorKind::kInvalidArgument, "2 ranks (0, 3)");
}

TEST(AgreeOwner, OwnerOnRank0PassesEverywhere) {
  for (int n : {1, 2, 3}) {
    run_ok(n, [n](Group& g) {
      Owner o = agree_owner(g, g.rank() == 0);
      EXPECT_EQ(o.count, 1);
      EXPECT_EQ(o.rank, 0);
      at::Tensor t = at::ones({2});
      g.all_reduce(t);
      EXPECT_EQ(t[0].item<float>(), static_cast<float>(n));
    });
  }
}

TEST(AgreeError, EveryRankLearnsTheFirstFailingRankAndItsMessage) {
  run_ok(4, [](Group& g) {
    std::optional<std::string> mine;
    if (g.rank() == 2) mine = "tile 5 ran out of memory";
    if (g.rank() == 3) mine = "later failure";
    ErrorAgreement a = agree_error(g, mine);
    EXPECT_TRUE(a.failed);
    EXPECT_EQ(a.rank, 2);
    EXPECT_EQ(a.message, "tile 5 ran out of memory");
    try {
      throw_agreed(a, g.rank());
      ADD_FAILURE() << "rank " << g.rank() << ": throw_agreed returned on an agreed failure";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kDistributed);
      if (g.rank() == 2) {
        EXPECT_STREQ(e.what(), "tile 5 ran out of memory");
      } else {
        EXPECT_STREQ(e.what(), "rank 2 failed: tile 5 ran out of memory");
      }
    }
    ErrorAgreement none = agree_error(g, std::nullopt);
    EXPECT_FALSE(none.failed);
    EXPECT_EQ(none.rank, -1);
    EXPECT_THROW(throw_agreed(none, g.rank()), Error);
  });
}

TEST(AgreeError, EmptyMessageStillCountsAsFailure) {
  run_ok(2, [](Group& g) {
    ErrorAgreement a = agree_error(g, g.rank() == 1 ? std::optional<std::string>("") : std::nullopt);
    EXPECT_TRUE(a.failed);
    EXPECT_EQ(a.rank, 1);
    EXPECT_EQ(a.message, "");
  });
}

// A rank throws before a collective its peers are already waiting in: every
// rank returns (long before the 60 s timeout), the thrower with its own
// error, the others with a peer error naming it.
TEST(RankFailure, ThrowBeforeCollectiveReachesEveryRank) {
  for (int failing : {0, 1, 2}) {
    const auto start = std::chrono::steady_clock::now();
    auto results = run_threads(3, [failing](Group& g) {
      if (g.rank() == failing) throw std::runtime_error("weights for block 7 are missing");
      at::Tensor t = at::ones({1024});
      g.all_reduce(t);
      g.all_gather(t);
    });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    RecordProperty("returned_after_s_failing_rank_" + std::to_string(failing), std::to_string(seconds));
    ASSERT_EQ(results.size(), 3u);
    for (const auto& r : results) {
      ASSERT_FALSE(r.ok) << "rank " << r.rank;
      if (r.rank == failing) {
        EXPECT_EQ(r.error, "weights for block 7 are missing");
        EXPECT_THROW(std::rethrow_exception(r.exception), std::runtime_error);
      } else {
        EXPECT_EQ(r.error, "rank " + std::to_string(failing) + " failed: weights for block 7 are missing")
            << "rank " << r.rank;
        try {
          std::rethrow_exception(r.exception);
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::kDistributed);
        } catch (...) {
          ADD_FAILURE() << "rank " << r.rank << " threw something other than h3::Error";
        }
      }
    }
  }
}

// The same, with a failure in the middle of a loop of collectives, while the
// peers sit in different phases of the step (metadata or data exchange).
TEST(RankFailure, ThrowMidLoopReachesEveryRank) {
  auto results = run_threads(4, [](Group& g) {
    for (int i = 0; i < 50; ++i) {
      if (g.rank() == 3 && i == 20) throw Error(ErrorKind::kFormat, "bad tile");
      at::Tensor t = at::ones({16 << g.rank()});
      g.all_gather(t);
      at::Tensor s = at::ones({64});
      g.all_reduce(s);
    }
  });
  for (const auto& r : results) {
    ASSERT_FALSE(r.ok) << "rank " << r.rank;
    if (r.rank == 3) {
      EXPECT_EQ(r.error, "bad tile");
    } else {
      EXPECT_EQ(r.error, "rank 3 failed: bad tile") << "rank " << r.rank;
    }
  }
}

TEST(AgreeCancel, CancelOnRank2Of3StopsEveryRankAtTheSameIteration) {
  std::vector<int> stopped_at(3, -1);
  run_ok(3, [&stopped_at](Group& g) {
    for (int i = 0; i < 100; ++i) {
      // The flush arrives on rank 2 only, while it works on iteration 37.
      const bool flushing = g.rank() == 2 && i == 37;
      if (agree_cancel(g, flushing)) {
        stopped_at[g.rank()] = i;
        return;
      }
      at::Tensor t = at::ones({8});
      g.all_reduce(t);
    }
  });
  EXPECT_EQ(stopped_at, (std::vector<int>{37, 37, 37}));
}

TEST(AgreeCancel, NoCancelNoStop) {
  run_ok(2, [](Group& g) {
    for (int i = 0; i < 5; ++i) EXPECT_FALSE(agree_cancel(g, false));
  });
}

}  // namespace
}  // namespace h3::dist
