// The CPU block cache (common/cpu_block_cache.h): a large block freed on a thread in scope is
// handed to the next allocation of its rounded size; small blocks, threads out of scope and
// blocks freed out of scope are LibTorch's default; release gives every kept block back.
#include "common/cpu_block_cache.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <thread>

namespace h3 {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// A float tensor of exactly `bytes` bytes (a multiple of 4).
at::Tensor block(int64_t bytes) {
  return at::empty({bytes / 4}, at::kFloat);
}

class CpuBlockCache : public ::testing::Test {
 protected:
  void SetUp() override {
    install_cpu_block_cache();
    release_cpu_block_cache();
  }
  void TearDown() override { release_cpu_block_cache(); }
};

TEST_F(CpuBlockCache, AFreedLargeBlockServesTheNextAllocationOfItsRoundedSize) {
  CpuBlockCacheScope scope;
  const CpuBlockCacheStats before = cpu_block_cache_stats();
  void* first = nullptr;
  {
    at::Tensor t = block(3 * kMiB + 4);  // rounded up to whole 4 KiB pages
    first = t.data_ptr();
    EXPECT_EQ(cpu_block_cache_stats().in_use_bytes - before.in_use_bytes, 3 * kMiB + 4096);
  }
  EXPECT_EQ(cpu_block_cache_stats().kept_bytes, 3 * kMiB + 4096);
  at::Tensor again = block(3 * kMiB + 400);  // another size in the same pages
  EXPECT_EQ(again.data_ptr(), first);
  EXPECT_EQ(cpu_block_cache_stats().kept_bytes, 0);
  EXPECT_EQ(cpu_block_cache_stats().reuses, before.reuses + 1);
  at::Tensor other = block(5 * kMiB);  // another size: a block of its own
  EXPECT_NE(other.data_ptr(), first);
  EXPECT_EQ(cpu_block_cache_stats().reuses, before.reuses + 1);
}

TEST_F(CpuBlockCache, SmallBlocksAndThreadsOutOfScopeAreNotKept) {
  {
    CpuBlockCacheScope scope;
    block(kCachedBlockMin - 4096);
  }
  block(8 * kMiB);  // this thread is out of scope now
  std::thread([] { block(8 * kMiB); }).join();
  EXPECT_EQ(cpu_block_cache_stats().kept_bytes, 0);
  EXPECT_EQ(cpu_block_cache_stats().in_use_bytes, 0);
}

TEST_F(CpuBlockCache, OnlyBlocksFreedInScopeAreKeptAndReleaseGivesEverythingBack) {
  CpuBlockCacheScope scope;
  at::Tensor given_away = block(2 * kMiB);
  std::thread([t = std::move(given_away)]() mutable { t = at::Tensor(); }).join();
  EXPECT_EQ(cpu_block_cache_stats().kept_bytes, 0) << "a block freed out of scope was kept";
  EXPECT_EQ(cpu_block_cache_stats().in_use_bytes, 0);
  void* p = nullptr;
  {
    at::Tensor t = block(2 * kMiB);
    p = t.data_ptr();
  }
  EXPECT_EQ(cpu_block_cache_stats().kept_bytes, 2 * kMiB);
  {
    at::Tensor again = block(2 * kMiB);
    EXPECT_EQ(again.data_ptr(), p);
    at::Tensor second = block(2 * kMiB);  // the first is in use: a new one
    EXPECT_NE(second.data_ptr(), p);
  }
  EXPECT_EQ(cpu_block_cache_stats().kept_bytes, 4 * kMiB);
  // In use while released: untouched, and kept when freed afterwards.
  at::Tensor held = block(6 * kMiB);
  held.fill_(1.5f);
  release_cpu_block_cache();
  EXPECT_EQ(cpu_block_cache_stats().kept_bytes, 0);
  EXPECT_EQ(held.sum().item<double>(), 1.5 * 6 * kMiB / 4);
  held = at::Tensor();
  EXPECT_EQ(cpu_block_cache_stats().kept_bytes, 6 * kMiB);
}

}  // namespace
}  // namespace h3
