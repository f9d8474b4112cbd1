// The CPU block cache (common/cpu_block_cache.h): a large block freed on a thread in scope is
// handed to the next allocation of its rounded size; small blocks, threads out of scope and
// blocks freed out of scope are LibTorch's default; release gives every kept block back; a trim
// gives back the sizes no allocation asked for in its last intervals.
#include "common/cpu_block_cache.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "h3/error.h"

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

// An endless stream's chunks are intervals: a size asked for in the last `intervals` of them keeps
// its blocks, one not asked for since goes back, and the cache stops tracking it.
TEST_F(CpuBlockCache, ATrimGivesBackTheSizesNotAskedForInItsLastIntervals) {
  CpuBlockCacheScope scope;
  block(2 * kMiB);  // allocated and freed at once: kept
  block(3 * kMiB);
  EXPECT_EQ(cpu_block_cache_stats().kept_bytes, 5 * kMiB);
  EXPECT_EQ(cpu_block_cache_stats().sizes, 2);
  trim_cpu_block_cache(2);  // both asked for in the interval that ends
  EXPECT_EQ(cpu_block_cache_stats().kept_bytes, 5 * kMiB);
  block(2 * kMiB);                    // the 2 MiB size again, from its kept block
  at::Tensor held = block(4 * kMiB);  // in use across the trims
  trim_cpu_block_cache(2);            // 3 MiB was asked for one interval ago: still within 2
  EXPECT_EQ(cpu_block_cache_stats().kept_bytes, 5 * kMiB);
  trim_cpu_block_cache(2);  // 3 MiB two intervals ago: given back; 2 MiB one ago: kept
  EXPECT_EQ(cpu_block_cache_stats().kept_bytes, 2 * kMiB);
  EXPECT_EQ(cpu_block_cache_stats().sizes, 2) << "2 MiB kept, 4 MiB asked for one interval ago";
  trim_cpu_block_cache(2);  // both asked for two intervals ago: 2 MiB given back, 4 MiB untracked
  EXPECT_EQ(cpu_block_cache_stats().kept_bytes, 0);
  EXPECT_EQ(cpu_block_cache_stats().sizes, 0) << "a size nobody asks for any more is still tracked";
  held = at::Tensor();  // freed now, in scope: kept, and tracked from this interval
  EXPECT_EQ(cpu_block_cache_stats().kept_bytes, 4 * kMiB);
  EXPECT_EQ(cpu_block_cache_stats().sizes, 1);
  trim_cpu_block_cache(2);
  trim_cpu_block_cache(2);
  EXPECT_EQ(cpu_block_cache_stats().kept_bytes, 4 * kMiB);
  trim_cpu_block_cache(2);
  EXPECT_EQ(cpu_block_cache_stats().kept_bytes, 0);
  EXPECT_EQ(cpu_block_cache_stats().sizes, 0);
  EXPECT_EQ(cpu_block_cache_stats().in_use_bytes, 0);
  try {
    trim_cpu_block_cache(0);
    FAIL() << "a trim of 0 intervals was taken";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "trim_cpu_block_cache: 0 intervals (at least 1: the one ending)");
  }
}

}  // namespace
}  // namespace h3
