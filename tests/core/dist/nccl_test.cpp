// The NCCL group at world size = the GPUs present (rank r on cuda:r), against values
// computed locally; CPU tensors staged through the group's device. Skipped, with the reason,
// in builds without NCCL and on machines with fewer than two GPUs. A build without NCCL's refusal
// is tests/build/cuda_less_refusals_test.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "common/device.h"
#include "dist/group.h"
#include "dist/world.h"
#include "dist_test_util.h"
#include "h3/error.h"

namespace h3::dist {
namespace {

using testing::run_ok;

// The NCCL world of this machine, or a skip naming what is missing.
int nccl_world_or_skip() {
  if (!has_nccl()) return 0;
  return cuda_device_count();
}

#define H3_REQUIRE_NCCL_WORLD(n)                                                                \
  const int n = nccl_world_or_skip();                                                           \
  if (!has_nccl()) GTEST_SKIP() << "this build has no NCCL backend (no CUDA LibTorch/toolkit)"; \
  if (n < 2) GTEST_SKIP() << "needs 2 or more GPUs for an NCCL world, " << n << " visible"

WorldOptions nccl() {
  WorldOptions o;
  o.backend = Backend::kNccl;
  o.timeout = std::chrono::seconds(60);
  return o;
}

TEST(Nccl, AllReduceBroadcastAndGatherOnTheRanksGpus) {
  H3_REQUIRE_NCCL_WORLD(n);
  run_ok(
      n,
      [n](Group& g) {
        EXPECT_STREQ(g.backend(), "nccl");
        EXPECT_EQ(g.device(), c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(g.rank())));
        const auto dev = at::TensorOptions().device(g.device());
        at::Tensor t = at::arange(6, dev.dtype(at::kFloat)).view({2, 3}) * (g.rank() + 1);
        g.all_reduce(t);
        const float tri = n * (n + 1) / 2.0f;
        EXPECT_TRUE(at::equal(t.cpu(), at::arange(6, at::kFloat).view({2, 3}) * tri));

        at::Tensor b = at::full({4}, 1.5, dev.dtype(at::kBFloat16));
        g.all_reduce(b);
        EXPECT_TRUE(at::equal(b.cpu(), at::full({4}, 1.5 * n, at::kBFloat16)));

        at::Tensor m = at::full({3}, static_cast<double>(g.rank()), dev.dtype(at::kDouble));
        g.all_reduce(m, ReduceOp::kMax);
        EXPECT_TRUE(at::equal(m.cpu(), at::full({3}, n - 1.0, at::kDouble)));

        at::Tensor root =
            g.rank() == 1 ? at::arange(5, dev.dtype(at::kLong)) : at::zeros({5}, dev.dtype(at::kLong));
        g.broadcast(root, 1);
        EXPECT_TRUE(at::equal(root.cpu(), at::arange(5, at::kLong)));

        // Uneven shapes: rank r contributes r rows.
        const int r = g.rank();
        auto all = g.all_gather(at::arange(r * 3, dev.dtype(at::kFloat)).view({r, 3}) + 100 * r);
        ASSERT_EQ(all.size(), static_cast<size_t>(n));
        for (int k = 0; k < n; ++k) {
          EXPECT_TRUE(all[k].is_cuda());
          EXPECT_TRUE(at::equal(all[k].cpu(), at::arange(k * 3, at::kFloat).view({k, 3}) + 100 * k));
        }
        EXPECT_EQ(g.broadcast_string(g.rank() == 0 ? "from rank 0" : "", 0), "from rank 0");
        EXPECT_EQ(g.all_reduce_int(g.rank() + 1), n * (n + 1) / 2);
        g.barrier();
      },
      nccl());
}

// Ulysses' exchange: grouped send/recv pairs, parts of any length, empty ones skipped.
TEST(Nccl, AllToAllMovesUnevenAndEmptyPartsBetweenTheGpus) {
  H3_REQUIRE_NCCL_WORLD(n);
  run_ok(
      n,
      [n](Group& g) {
        const auto dev = at::TensorOptions().device(g.device());
        for (auto dtype : {at::kFloat, at::kBFloat16}) {
          std::vector<at::Tensor> parts;
          for (int d = 0; d < n; ++d) {
            parts.push_back((at::arange((g.rank() + d) * 2, dev.dtype(at::kFloat)).view({g.rank() + d, 2}) +
                             100 * g.rank() + 1000 * d)
                                .to(dtype));
          }
          const auto got = g.all_to_all(parts);
          for (int s = 0; s < n; ++s) {
            EXPECT_TRUE(got[s].is_cuda());
            const auto want = (at::arange((s + g.rank()) * 2, at::kFloat).view({s + g.rank(), 2}) + 100 * s +
                               1000 * g.rank())
                                  .to(dtype);
            EXPECT_TRUE(at::equal(got[s].cpu(), want)) << "from rank " << s;
          }
        }
      },
      nccl());
}

TEST(Nccl, CpuTensorsAreStagedThroughTheDevice) {
  H3_REQUIRE_NCCL_WORLD(n);
  run_ok(
      n,
      [n](Group& g) {
        at::Tensor t = at::full({4}, static_cast<double>(g.rank() + 1), at::kFloat);
        g.all_reduce(t);
        EXPECT_FALSE(t.is_cuda());
        EXPECT_TRUE(at::equal(t, at::full({4}, n * (n + 1) / 2.0, at::kFloat)));
        auto all = g.all_gather(at::full({2}, static_cast<double>(g.rank()), at::kFloat));
        for (int k = 0; k < n; ++k) {
          EXPECT_FALSE(all[k].is_cuda());
          EXPECT_TRUE(at::equal(all[k], at::full({2}, static_cast<double>(k), at::kFloat)));
        }
      },
      nccl());
}

TEST(Nccl, ARankOnTheWrongGpuIsAnAgreedError) {
  H3_REQUIRE_NCCL_WORLD(n);
  auto results = run_threads(
      n,
      [](Group& g) {
        // Rank 0 passes a tensor on rank 1's GPU: every rank gets the same error.
        const int other = (g.rank() + 1) % g.size();
        const c10::Device d =
            g.rank() == 0 ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(other)) : g.device();
        at::Tensor t = at::ones({2}, at::TensorOptions().device(d));
        g.all_reduce(t);
      },
      nccl());
  for (const auto& r : results) {
    EXPECT_FALSE(r.ok) << "rank " << r.rank;
    EXPECT_NE(r.error.find("rank 0 passed a tensor on the wrong device"), std::string::npos)
        << "rank " << r.rank << ": " << r.error;
  }
}

}  // namespace
}  // namespace h3::dist
