// Timeouts: a collective a peer never joins ends with an error naming the
// rank and the operation, and the group is unusable afterwards.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/error.h"
#include "dist/world.h"

namespace h3::dist {
namespace {

WorldOptions short_timeout() {
  WorldOptions o;
  o.timeout = std::chrono::milliseconds(300);
  return o;
}

ErrorKind kind_of(const RankResult& r) {
  if (!r.exception) return ErrorKind::kInternal;
  try {
    std::rethrow_exception(r.exception);
  } catch (const Error& e) {
    return e.kind();
  } catch (...) {
  }
  return ErrorKind::kInternal;
}

TEST(Timeout, CollectiveTimeoutNamesRankAndOperation) {
  auto results = run_threads(
      2,
      [](Group& g) {
        if (g.rank() == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // never joins
          return;
        }
        at::Tensor t = at::ones({4});
        try {
          g.all_reduce(t);
        } catch (const Error&) {
          EXPECT_TRUE(g.broken());
          // The transport is out of step: later collectives refuse at once.
          try {
            g.barrier();
            ADD_FAILURE() << "barrier ran on a broken group";
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("failed earlier"), std::string::npos) << e.what();
          }
          throw;
        }
      },
      short_timeout());
  ASSERT_EQ(results.size(), 2u);
  EXPECT_FALSE(results[0].ok);
  EXPECT_EQ(kind_of(results[0]), ErrorKind::kDistributed);
  EXPECT_NE(results[0].error.find("rank 0: all_reduce timed out after 300 ms"), std::string::npos)
      << results[0].error;
  EXPECT_TRUE(results[1].ok) << results[1].error;
}

TEST(Timeout, EachOperationIsNamed) {
  for (std::string op : {"all_gather", "broadcast", "barrier", "broadcast_string"}) {
    auto results = run_threads(
        2,
        [&op](Group& g) {
          if (g.rank() == 1) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1000));
            return;
          }
          at::Tensor t = at::ones({4});
          if (op == "all_gather") g.all_gather(t);
          if (op == "broadcast") g.broadcast(t, 0);
          if (op == "barrier") g.barrier();
          if (op == "broadcast_string") g.broadcast_string("x", 0);
        },
        short_timeout());
    // broadcast_string exchanges its length first, through broadcast_int.
    const std::string named = op == "broadcast_string" ? "broadcast_int" : op;
    EXPECT_NE(results[0].error.find("rank 0: " + named + " timed out"), std::string::npos)
        << op << ": " << results[0].error;
  }
}

// A rank arriving late at a collective its peer already gave up on hears of
// the peer's timeout instead of waiting for its own.
TEST(Timeout, LateRankHearsOfThePeersTimeout) {
  auto results = run_threads(
      2,
      [](Group& g) {
        if (g.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1200));
        g.all_reduce_int(1);
      },
      short_timeout());
  EXPECT_NE(results[0].error.find("rank 0: all_reduce_int timed out"), std::string::npos) << results[0].error;
  EXPECT_EQ(results[1].error.rfind("rank 0 failed: rank 0: all_reduce_int timed out", 0), 0u)
      << results[1].error;
  EXPECT_EQ(kind_of(results[1]), ErrorKind::kDistributed);
}

TEST(Timeout, ThreeRanksOneAbsentAllReturn) {
  auto results = run_threads(
      3,
      [](Group& g) {
        if (g.rank() == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1000));
          return;
        }
        at::Tensor t = at::ones({4});
        g.all_reduce(t);
      },
      short_timeout());
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(results[r].ok);
    EXPECT_NE(results[r].error.find("timed out"), std::string::npos)
        << "rank " << r << ": " << results[r].error;
  }
}

}  // namespace
}  // namespace h3::dist
