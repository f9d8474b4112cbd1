// Timeouts: a collective a peer never joins ends with an error naming the
// rank and the operation, and the group is unusable afterwards. The absent
// rank stays away until the others gave up (a latch, not a sleep), so the
// outcome does not depend on how fast the machine is.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "dist/world.h"
#include "dist_test_util.h"
#include "h3/error.h"

namespace h3::dist {
namespace {

using testing::Latch;

class Timeout : public ::testing::TestWithParam<ThreadTransport> {
 protected:
  WorldOptions short_timeout() const {
    WorldOptions o;
    o.timeout = std::chrono::milliseconds(300);
    o.thread_transport = GetParam();
    return o;
  }
};

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

TEST_P(Timeout, CollectiveTimeoutNamesRankAndOperation) {
  Latch gave_up;
  auto results = run_threads(
      2,
      [&gave_up](Group& g) {
        if (g.rank() == 1) {
          // Never joins: leaves only once rank 0 gave up on it.
          EXPECT_TRUE(gave_up.wait_for(1)) << "rank 0's all_reduce never ended";
          return;
        }
        at::Tensor t = at::ones({4});
        try {
          g.all_reduce(t);
          ADD_FAILURE() << "all_reduce returned although rank 1 never joined";
        } catch (const Error&) {
          gave_up.arrive();
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

TEST_P(Timeout, EachOperationIsNamed) {
  for (std::string op : {"all_gather", "broadcast", "barrier", "broadcast_string"}) {
    Latch gave_up;
    auto results = run_threads(
        2,
        [&op, &gave_up](Group& g) {
          if (g.rank() == 1) {
            EXPECT_TRUE(gave_up.wait_for(1)) << op << ": rank 0 never gave up";
            return;
          }
          at::Tensor t = at::ones({4});
          try {
            if (op == "all_gather") g.all_gather(t);
            if (op == "broadcast") g.broadcast(t, 0);
            if (op == "barrier") g.barrier();
            if (op == "broadcast_string") g.broadcast_string("x", 0);
            ADD_FAILURE() << op << " returned although rank 1 never joined";
          } catch (...) {
            gave_up.arrive();
            throw;
          }
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
TEST_P(Timeout, LateRankHearsOfThePeersTimeout) {
  auto results = run_threads(
      2,
      [](Group& g) {
        if (g.rank() == 1) {
          // Arrives only once rank 0 gave up and its failure is on the board (run_threads
          // posts it when rank 0's function throws). The bound only guards against a hang.
          for (int i = 0; i < 6000 && !g.peer_failure(); ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
          EXPECT_TRUE(g.peer_failure().has_value()) << "rank 0 never posted its failure";
        }
        g.all_reduce_int(1);
      },
      short_timeout());
  EXPECT_FALSE(results[0].ok);
  EXPECT_FALSE(results[1].ok);
  EXPECT_NE(results[0].error.find("rank 0: all_reduce_int timed out"), std::string::npos) << results[0].error;
  EXPECT_EQ(results[1].error.rfind("rank 0 failed: rank 0: all_reduce_int timed out", 0), 0u)
      << results[1].error;
  EXPECT_EQ(kind_of(results[1]), ErrorKind::kDistributed);
}

TEST_P(Timeout, ThreeRanksOneAbsentAllReturn) {
  Latch gave_up;
  auto results = run_threads(
      3,
      [&gave_up](Group& g) {
        if (g.rank() == 2) {
          EXPECT_TRUE(gave_up.wait_for(2)) << "ranks 0 and 1 did not both give up";
          return;
        }
        at::Tensor t = at::ones({4});
        try {
          g.all_reduce(t);
        } catch (...) {
          gave_up.arrive();
          throw;
        }
      },
      short_timeout());
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(results[r].ok);
    EXPECT_NE(results[r].error.find("timed out"), std::string::npos)
        << "rank " << r << ": " << results[r].error;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, Timeout, testing::thread_transports(), testing::transport_name);

}  // namespace
}  // namespace h3::dist
