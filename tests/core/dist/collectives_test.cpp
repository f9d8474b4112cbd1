// Collectives at 1..4 thread ranks, over shared memory and over Gloo, against values computed locally.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "dist/group.h"
#include "dist/world.h"
#include "dist_test_util.h"
#include "h3/error.h"

namespace h3::dist {
namespace {

using testing::run_ok;

class Collectives : public ::testing::TestWithParam<std::tuple<int, ThreadTransport>> {
 protected:
  static int ranks() { return std::get<0>(GetParam()); }
  static WorldOptions options() {
    WorldOptions o;
    o.thread_transport = std::get<1>(GetParam());
    return o;
  }
};

TEST_P(Collectives, AllReduceSumAndMax) {
  const int n = ranks();
  run_ok(
      n,
      [n](Group& g) {
        EXPECT_EQ(g.size(), n);
        at::Tensor t = at::arange(6, at::kFloat).view({2, 3}) * (g.rank() + 1);
        g.all_reduce(t);
        const float tri = n * (n + 1) / 2.0f;
        EXPECT_TRUE(at::equal(t, at::arange(6, at::kFloat).view({2, 3}) * tri));

        at::Tensor m = at::full({5}, static_cast<double>(g.rank() * 10), at::kDouble);
        g.all_reduce(m, ReduceOp::kMax);
        EXPECT_TRUE(at::equal(m, at::full({5}, (n - 1) * 10.0, at::kDouble)));
      },
      options());
}

TEST_P(Collectives, AllReduceHalfPrecisionAndNonContiguous) {
  const int n = ranks();
  run_ok(
      n,
      [n](Group& g) {
        at::Tensor b = at::full({4}, 1.5, at::kBFloat16);
        g.all_reduce(b);
        EXPECT_EQ(b.scalar_type(), at::kBFloat16);
        EXPECT_TRUE(at::equal(b, at::full({4}, 1.5 * n, at::kBFloat16)));

        at::Tensor base = at::zeros({3, 4}, at::kLong);
        at::Tensor col = base.select(1, 2);  // a strided view: reduced in place through it
        col.fill_(g.rank());
        g.all_reduce(col);
        EXPECT_EQ(base[1][2].item<int64_t>(), n * (n - 1) / 2);
        EXPECT_EQ(base[1][1].item<int64_t>(), 0);
      },
      options());
}

TEST_P(Collectives, AllGatherUnevenShapesAndEmptyContributions) {
  const int n = ranks();
  run_ok(
      n,
      [n](Group& g) {
        // Rank r contributes r rows of width 3 (rank 0 contributes nothing).
        const int r = g.rank();
        at::Tensor mine = at::arange(r * 3, at::kFloat).view({r, 3}) + 100 * r;
        auto all = g.all_gather(mine);
        ASSERT_EQ(all.size(), static_cast<size_t>(n));
        for (int k = 0; k < n; ++k) {
          EXPECT_EQ(all[k].sizes(), (std::vector<int64_t>{k, 3})) << "from rank " << k;
          EXPECT_TRUE(at::equal(all[k], at::arange(k * 3, at::kFloat).view({k, 3}) + 100 * k));
        }
        // Different ranks (dimension counts) per rank, and a dtype Gloo lacks.
        at::Tensor odd = r % 2 ? at::full({2, 2, r}, r, at::kBFloat16) : at::full({r + 1}, r, at::kBFloat16);
        auto odds = g.all_gather(odd);
        for (int k = 0; k < n; ++k) {
          at::Tensor want =
              k % 2 ? at::full({2, 2, k}, k, at::kBFloat16) : at::full({k + 1}, k, at::kBFloat16);
          EXPECT_TRUE(at::equal(odds[k], want)) << "from rank " << k;
        }
      },
      options());
}

TEST_P(Collectives, AllGatherIntoAReusedBuffer) {
  const int n = ranks();
  run_ok(
      n,
      [n](Group& g) {
        at::Tensor reuse;
        const uint8_t* first = nullptr;
        // Rows per rank: large, smaller (fits the buffer: reused), larger (a new, bigger buffer).
        for (const int64_t rows : {int64_t{4000}, int64_t{1000}, int64_t{9000}}) {
          SCOPED_TRACE("rows " + std::to_string(rows));
          const int r = g.rank();
          const at::Tensor mine = at::arange(rows * (r + 1), at::kFloat) + 1e6f * static_cast<float>(r);
          const auto all = g.all_gather(mine, &reuse);
          ASSERT_EQ(all.size(), static_cast<size_t>(n));
          for (int k = 0; k < n; ++k) {
            EXPECT_TRUE(
                at::equal(all[k], at::arange(rows * (k + 1), at::kFloat) + 1e6f * static_cast<float>(k)))
                << "from rank " << k;
          }
          if (n == 1) {
            EXPECT_FALSE(reuse.defined());  // one rank copies its own tensor: no buffer
            continue;
          }
          ASSERT_TRUE(reuse.defined());
          const auto* base = static_cast<const uint8_t*>(reuse.data_ptr());
          EXPECT_EQ(static_cast<const uint8_t*>(all[0].data_ptr()), base) << "the parts live in the buffer";
          if (rows == 4000) first = base;
          if (rows == 1000) {
            EXPECT_EQ(base, first) << "a smaller gather reuses the buffer";
          }
          if (rows == 9000) {
            EXPECT_GE(reuse.numel(), 9000 * 4 * n * (n + 1) / 2);
          }
        }
      },
      options());
}

TEST_P(Collectives, AllGatherAllEmpty) {
  const int n = ranks();
  run_ok(
      n,
      [n](Group& g) {
        auto all = g.all_gather(at::empty({0, 7}, at::kInt));
        ASSERT_EQ(all.size(), static_cast<size_t>(n));
        for (const auto& t : all) {
          EXPECT_EQ(t.sizes(), (std::vector<int64_t>{0, 7}));
          EXPECT_EQ(t.scalar_type(), at::kInt);
        }
      },
      options());
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  const int n = ranks();
  run_ok(
      n,
      [n](Group& g) {
        for (int root = 0; root < n; ++root) {
          at::Tensor t = at::full({3, 2}, static_cast<double>(g.rank() == root ? root + 7 : -1), at::kHalf);
          g.broadcast(t, root);
          EXPECT_TRUE(at::equal(t, at::full({3, 2}, root + 7.0, at::kHalf))) << "root " << root;
        }
        at::Tensor empty = at::empty({0});
        g.broadcast(empty, 0);
        EXPECT_EQ(empty.numel(), 0);
      },
      options());
}

TEST_P(Collectives, ScalarsStringsAndBarrier) {
  const int n = ranks();
  run_ok(
      n,
      [n](Group& g) {
        EXPECT_EQ(g.all_reduce_int(g.rank() + 1), n * (n + 1) / 2);
        EXPECT_EQ(g.all_reduce_int(g.rank() == n - 1 ? -5 : -9, ReduceOp::kMax), -5);
        EXPECT_EQ(g.broadcast_int(g.rank() * 1000 + 3, n - 1), (n - 1) * 1000 + 3);
        const std::string req =
            g.rank() == 0 ? std::string("{\"prompt\": \"a cat\", \"frames\": 33}") : "ignored";
        EXPECT_EQ(g.broadcast_string(req, 0), "{\"prompt\": \"a cat\", \"frames\": 33}");
        EXPECT_EQ(g.broadcast_string(g.rank() == 0 ? "" : "x", 0), "");
        g.barrier();
      },
      options());
}

// Rank s sends rank d a [s + d, 3] part (rank 0 to itself: an empty one) whose values name both.
at::Tensor part_from_to(int s, int d, at::ScalarType dtype) {
  return (at::arange((s + d) * 3, at::kLong).view({s + d, 3}) + 100 * s + 10000 * d).to(dtype);
}

TEST_P(Collectives, AllToAllUnevenAndEmptyPartsInRankOrder) {
  const int n = ranks();
  run_ok(
      n,
      [n](Group& g) {
        for (auto dtype : {at::kFloat, at::kBFloat16, at::kLong}) {
          std::vector<at::Tensor> parts;
          for (int d = 0; d < n; ++d) parts.push_back(part_from_to(g.rank(), d, dtype));
          const auto got = g.all_to_all(parts);
          ASSERT_EQ(static_cast<int>(got.size()), n);
          for (int s = 0; s < n; ++s) {
            EXPECT_EQ(got[s].scalar_type(), dtype);
            EXPECT_TRUE(at::equal(got[s], part_from_to(s, g.rank(), dtype))) << "from rank " << s;
          }
        }
        // Only within pairs of ranks (the others get empty parts): a subset exchanges in the world.
        std::vector<at::Tensor> parts(static_cast<size_t>(n), at::empty({0, 2}));
        const int peer = g.rank() ^ 1;
        if (peer < n) parts[static_cast<size_t>(peer)] = at::full({2, 2}, static_cast<float>(g.rank()));
        const auto got = g.all_to_all(parts);
        for (int s = 0; s < n; ++s) {
          if (s == peer) {
            EXPECT_TRUE(at::equal(got[s], at::full({2, 2}, static_cast<float>(peer))));
          } else {
            EXPECT_EQ(got[s].numel(), 0) << "from rank " << s;
          }
        }
      },
      options());
}

TEST(Disagreement, AllToAllPartsAreTheSameErrorOnEveryRank) {
  for (int n : {2, 3}) {
    // Rank 1 sends longs where the others send floats.
    auto results = run_threads(n, [n](Group& g) {
      std::vector<at::Tensor> parts(static_cast<size_t>(n),
                                    at::ones({2}, g.rank() == 1 ? at::kLong : at::kFloat));
      g.all_to_all(parts);
    });
    for (const auto& r : results) {
      ASSERT_FALSE(r.ok) << "rank " << r.rank;
      EXPECT_EQ(r.error, results[0].error);
      EXPECT_NE(r.error.find("disagree on the parts' dtype"), std::string::npos) << r.error;
    }
    // Rank 0 passes one part too few.
    results = run_threads(n, [n](Group& g) {
      std::vector<at::Tensor> parts(static_cast<size_t>(g.rank() == 0 ? n - 1 : n), at::ones({2}));
      g.all_to_all(parts);
    });
    for (const auto& r : results) {
      ASSERT_FALSE(r.ok) << "rank " << r.rank;
      EXPECT_NE(r.error.find("rank 0 passed a part count other than the group's size"), std::string::npos)
          << r.error;
    }
  }
}

TEST(Disagreement, ShapeIsTheSameErrorOnEveryRank) {
  for (int n : {2, 3, 4}) {
    auto results = run_threads(n, [](Group& g) {
      at::Tensor t = at::ones({g.rank() == 1 ? 4 : 3});
      g.all_reduce(t);
    });
    for (const auto& r : results) {
      ASSERT_FALSE(r.ok) << "rank " << r.rank;
      EXPECT_EQ(r.error, results[0].error);
      EXPECT_NE(r.error.find("rank 1 passes [4]"), std::string::npos) << r.error;
    }
  }
}

TEST(Disagreement, BroadcastRootIsTheSameErrorOnEveryRank) {
  for (int n : {2, 3, 4}) {
    auto results = run_threads(n, [](Group& g) { g.broadcast_int(5, g.rank() == 1 ? 1 : 0); });
    for (const auto& r : results) {
      ASSERT_FALSE(r.ok) << "rank " << r.rank;
      EXPECT_EQ(r.error, results[0].error);
      EXPECT_NE(r.error.find("disagree on the root"), std::string::npos) << r.error;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RanksAndTransports, Collectives,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), testing::thread_transports()),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  testing::transport_label(std::get<1>(info.param));
                         });

TEST(SingleGroup, EveryCollectiveIsLocal) {
  auto g = make_single_group();
  EXPECT_EQ(g->rank(), 0);
  EXPECT_EQ(g->size(), 1);
  at::Tensor t = at::arange(4, at::kFloat);
  g->all_reduce(t, ReduceOp::kMax);
  EXPECT_TRUE(at::equal(t, at::arange(4, at::kFloat)));
  auto all = g->all_gather(t);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_TRUE(at::equal(all[0], t));
  EXPECT_NE(all[0].data_ptr(), t.data_ptr());
  EXPECT_EQ(g->broadcast_string("hi", 0), "hi");
  EXPECT_EQ(g->broadcast_int(3, 0), 3);
  EXPECT_THROW(g->broadcast_int(3, 1), Error);
}

TEST(RunThreads, RejectsBadSizes) {
  EXPECT_THROW(run_threads(0, [](Group&) {}), Error);
  WorldOptions o;
  o.timeout = std::chrono::milliseconds(0);
  EXPECT_THROW(run_threads(
                   2, [](Group&) {}, o),
               Error);
}

TEST(RunThreads, ReturnsEveryRanksOutcome) {
  auto results = run_threads(3, [](Group& g) {
    if (g.rank() == 2) throw std::runtime_error("rank two says no");
  });
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(results[0].ok);
  EXPECT_TRUE(results[1].ok);
  EXPECT_FALSE(results[2].ok);
  EXPECT_EQ(results[2].error, "rank two says no");
  EXPECT_THROW(std::rethrow_exception(results[2].exception), std::runtime_error);
}

}  // namespace
}  // namespace h3::dist
