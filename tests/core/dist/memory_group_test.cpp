// The shared-memory transport of thread ranks: exact results on buffers large enough to split
// unevenly between the ranks, many collectives in a row, worlds side by side, and the choice of
// transport. (The collective, timeout and owner-wait tests run on it and on Gloo alike.)
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <thread>

#include "dist/group.h"
#include "dist/world.h"
#include "dist_test_util.h"
#include "h3/error.h"

namespace h3::dist {
namespace {

using testing::run_ok;

at::Tensor values_of(int rank, int64_t n) {
  at::Generator gen = at::detail::createCPUGenerator(100 + rank);
  return at::randn({n}, gen, at::TensorOptions().dtype(at::kFloat));
}

// Every rank failed with an h3::Error of kind kDistributed.
void expect_distributed_errors(const std::vector<RankResult>& results) {
  for (const auto& r : results) {
    try {
      std::rethrow_exception(r.exception);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kDistributed) << "rank " << r.rank;
    } catch (...) {
      ADD_FAILURE() << "rank " << r.rank << ": not an h3::Error";
    }
  }
}

TEST(MemoryGroup, ThreadRanksUseSharedMemoryUnlessGlooIsAsked) {
  run_ok(2, [](Group& g) { EXPECT_STREQ(g.backend(), "memory"); });
  WorldOptions gloo;
  gloo.thread_transport = ThreadTransport::kGloo;
  run_ok(
      2, [](Group& g) { EXPECT_STREQ(g.backend(), "gloo"); }, gloo);
}

// 1,000,003 elements do not split evenly in three: every share boundary is crossed. The sum is
// taken in rank order on every share, so every rank holds exactly ((a0 + a1) + a2).
TEST(MemoryGroup, LargeAllReduceIsTheSumInRankOrderBitForBit) {
  constexpr int64_t kN = 1'000'003;
  const at::Tensor expected = (values_of(0, kN) + values_of(1, kN)) + values_of(2, kN);
  at::Tensor maxima = at::maximum(at::maximum(values_of(0, kN), values_of(1, kN)), values_of(2, kN));
  run_ok(3, [&](Group& g) {
    at::Tensor t = values_of(g.rank(), kN);
    g.all_reduce(t);
    EXPECT_TRUE(at::equal(t, expected)) << "rank " << g.rank();
    at::Tensor m = values_of(g.rank(), kN);
    g.all_reduce(m, ReduceOp::kMax);
    EXPECT_TRUE(at::equal(m, maxima)) << "rank " << g.rank();
    // Fewer elements than ranks: some shares are empty.
    at::Tensor few = at::full({2}, g.rank() + 1, at::kLong);
    g.all_reduce(few);
    EXPECT_TRUE(at::equal(few, at::full({2}, 6, at::kLong))) << "rank " << g.rank();
  });
}

TEST(MemoryGroup, LargeUnevenAllGatherAndBroadcast) {
  run_ok(3, [](Group& g) {
    const int64_t n = g.rank() == 1 ? 0 : 300'000 * (g.rank() + 1);
    auto all = g.all_gather(values_of(g.rank(), n).view({-1, 3}));
    ASSERT_EQ(all.size(), 3u);
    for (int r = 0; r < 3; ++r) {
      const int64_t rn = r == 1 ? 0 : 300'000 * (r + 1);
      EXPECT_TRUE(at::equal(all[r], values_of(r, rn).view({-1, 3}))) << "rank " << g.rank() << " from " << r;
    }
    at::Tensor b = g.rank() == 2 ? values_of(2, 500'001) : at::zeros({500'001});
    g.broadcast(b, 2);
    EXPECT_TRUE(at::equal(b, values_of(2, 500'001))) << "rank " << g.rank();
  });
}

// Thousands of meetings in a row, of changing sizes and kinds, stay in step.
TEST(MemoryGroup, ManyCollectivesInARowStayInStep) {
  run_ok(4, [](Group& g) {
    for (int i = 0; i < 500; ++i) {
      at::Tensor t = at::full({i % 7 + 1}, static_cast<double>(g.rank() + i), at::kDouble);
      g.all_reduce(t);
      ASSERT_TRUE(at::equal(t, at::full({i % 7 + 1}, 6.0 + 4.0 * i, at::kDouble))) << "call " << i;
      ASSERT_EQ(g.broadcast_int(g.rank() == i % 4 ? i : -1, i % 4), i);
      auto all = g.all_gather(at::full({g.rank()}, i, at::kInt));
      for (int r = 0; r < 4; ++r) ASSERT_EQ(all[r].numel(), r);
    }
  });
}

// Each world has its own meetings: two at once, of different sizes, never mix.
TEST(MemoryGroup, TwoWorldsAtOnceDoNotMix) {
  auto world = [](int size, double base) {
    run_ok(size, [size, base](Group& g) {
      for (int i = 0; i < 200; ++i) {
        at::Tensor t = at::full({64}, base, at::kDouble);
        g.all_reduce(t);
        ASSERT_TRUE(at::equal(t, at::full({64}, base * size, at::kDouble)));
      }
    });
  };
  std::thread a(world, 2, 1.0), b(world, 3, 10.0);
  a.join();
  b.join();
}

// Ranks out of step: one skipped a collective its peer runs, or ran one more. The meetings of
// different collectives used to pair up anyway (a meeting is a count): each rank copied by its
// own layout, their counts of ranks at work went apart, and the rank that then timed out waited
// for ever for a peer to stop working (a live stream whose ranks ran different step counts hung
// past 400 s). Now every rank's collective fails at the first meeting where they differ, naming
// each rank's collective; the group is broken afterwards. The short timeout only bounds a rank
// that waits for a peer which has left; the test's meson timeout bounds a hang.
TEST(MemoryGroup, RanksOutOfStepFailOnEveryRankNamingEachRanksCollective) {
  WorldOptions o;
  o.timeout = std::chrono::seconds(2);
  const std::string why =
      "; a rank skipped, added or reordered a collective (every rank must run the same collectives in the "
      "same order)";
  // Rank 1 skips the all_reduce: its all_gather meets rank 0's all_reduce (metadata rows of 104
  // bytes each, alike in size: only the operation tells them apart).
  const std::string skipped =
      "the ranks are out of step: rank 0 is in all_reduce (meeting 1 of 2, 224 bytes), "
      "rank 1 is in all_gather (meeting 1 of 2, 224 bytes)" +
      why;
  auto results = run_threads(
      2,
      [](Group& g) {
        at::Tensor t = at::ones({4});
        if (g.rank() == 0) g.all_reduce(t);
        g.all_gather(t);
      },
      o);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_FALSE(results[0].ok);
  EXPECT_EQ(results[0].error, "rank 0: all_reduce: " + skipped);
  EXPECT_FALSE(results[1].ok);
  EXPECT_EQ(results[1].error, "rank 1: all_gather: " + skipped);
  expect_distributed_errors(results);

  // Rank 1 runs one all_reduce more (a forward more) before the step count both broadcast: its
  // all_reduce meets rank 0's broadcast_int. Then the group is broken on both.
  const std::string added =
      "the ranks are out of step: rank 0 is in broadcast_int (meeting 1 of 2, 224 bytes), "
      "rank 1 is in all_reduce (meeting 1 of 2, 224 bytes)" +
      why;
  std::vector<std::string> after(2);
  results = run_threads(
      2,
      [&](Group& g) {
        at::Tensor t = at::ones({4});
        g.all_reduce(t);
        try {
          if (g.rank() == 1) g.all_reduce(t);
          g.broadcast_int(3, 0);
        } catch (const Error&) {
          EXPECT_TRUE(g.broken());
          try {
            g.barrier();
          } catch (const Error& e) {
            after[static_cast<size_t>(g.rank())] = e.what();
          }
          throw;
        }
      },
      o);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].error, "rank 0: broadcast_int: " + added);
  EXPECT_EQ(results[1].error, "rank 1: all_reduce: " + added);
  EXPECT_EQ(after[0],
            "rank 0: cannot run barrier: the group failed earlier (rank 0: broadcast_int: " + added + ")");
  EXPECT_EQ(after[1],
            "rank 1: cannot run barrier: the group failed earlier (rank 1: all_reduce: " + added + ")");

  // Three ranks, rank 2 one broadcast ahead: the ranks in step are named alike.
  results = run_threads(
      3,
      [](Group& g) {
        at::Tensor b = at::zeros({3});
        if (g.rank() != 2) g.broadcast(b, 0);
        g.barrier();
      },
      o);
  const std::string three =
      "the ranks are out of step: rank 0 is in broadcast (meeting 1 of 2, 360 bytes), "
      "rank 1 is in broadcast (meeting 1 of 2, 360 bytes), rank 2 is in barrier "
      "(meeting 1 of 2, 360 bytes)" +
      why;
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].error, "rank 0: broadcast: " + three);
  EXPECT_EQ(results[1].error, "rank 1: broadcast: " + three);
  EXPECT_EQ(results[2].error, "rank 2: barrier: " + three);
}

// The same faults on Gloo (thread ranks asking for it; a process world runs the same group). Gloo
// pairs a rank's payload with whatever its peer sends, and on payloads of different sizes its
// transport thread aborted the whole process (`Received data size doesn't match expected
// size`), possibly the application holding rank 0. Every collective now opens with a row of one
// length whatever the collective (Group::open), so the ranks meet there and fail alike.
TEST(GlooGroup, RanksOutOfStepFailOnEveryRankInsteadOfAbortingTheProcess) {
  WorldOptions o;
  o.timeout = std::chrono::seconds(5);
  o.thread_transport = ThreadTransport::kGloo;
  const std::string why =
      "; a rank skipped, added or reordered a collective (every rank must run the same collectives in the "
      "same order)";
  // Rank 1 skips an all_reduce of 4 floats and goes on to an all_gather of 1,000: the payloads
  // differ in size, the openings do not.
  auto results = run_threads(
      2,
      [](Group& g) {
        at::Tensor small = at::ones({4}), large = at::ones({1000});
        if (g.rank() == 0) g.all_reduce(small);
        g.all_gather(large);
      },
      o);
  const std::string skipped =
      "the ranks are out of step: rank 0 is in all_reduce, rank 1 is in all_gather" + why;
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].error, "rank 0: all_reduce: " + skipped);
  EXPECT_EQ(results[1].error, "rank 1: all_gather: " + skipped);
  // Rank 1 runs one all_reduce more where rank 0 agrees on a step count (broadcast_int).
  results = run_threads(
      2,
      [](Group& g) {
        at::Tensor t = at::ones({64});
        g.all_reduce(t);
        if (g.rank() == 1) g.all_reduce(t);
        g.broadcast_int(3, 0);
      },
      o);
  const std::string added =
      "the ranks are out of step: rank 0 is in broadcast_int, rank 1 is in all_reduce" + why;
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].error, "rank 0: broadcast_int: " + added);
  EXPECT_EQ(results[1].error, "rank 1: all_reduce: " + added);
  expect_distributed_errors(results);
  // In step again, the integer collectives and the barrier still give their values on every rank.
  std::vector<int64_t> got(6);
  run_ok(
      2,
      [&](Group& g) {
        const size_t r = static_cast<size_t>(g.rank());
        got[r] = g.all_reduce_int(10 + g.rank());
        got[2 + r] = g.all_reduce_int(10 + g.rank(), ReduceOp::kMax);
        g.barrier();
        got[4 + r] = g.broadcast_int(g.rank() == 1 ? 42 : -1, 1);
      },
      o);
  EXPECT_EQ(got, (std::vector<int64_t>{21, 21, 11, 11, 42, 42}));
}

}  // namespace
}  // namespace h3::dist
