#include "common/cpu_block_cache.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "h3/error.h"

namespace h3 {
namespace {

thread_local int t_scopes = 0;

// Rounded up to whole pages, so that sizes a few bytes apart share their blocks.
size_t rounded(size_t n) {
  constexpr size_t kPage = 4096;
  return (n + kPage - 1) / kPage * kPage;
}

class BlockCache final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    if (t_scopes == 0 || n < kCachedBlockMin) {
      void* data = c10::alloc_cpu(n);  // what LibTorch's default allocator does
      return c10::DataPtr(data, data, &give_back, c10::Device(c10::kCPU));
    }
    const size_t size = rounded(n);
    void* data = take_kept(size);  // also marks the size asked for in this interval
    if (!data) {
      data = c10::alloc_cpu(size);  // throws c10::Error when the system has none; outside the lock
      std::lock_guard<std::mutex> lock(mutex_);
      sizes_[data] = size;
      in_use_ += static_cast<int64_t>(size);
    }
    return c10::DataPtr(data, data, &give_back, c10::Device(c10::kCPU));
  }

  c10::DeleterFnPtr raw_deleter() const override { return &give_back; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  void trim(int64_t intervals) {
    std::vector<void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = asked_.begin(); it != asked_.end();) {
        if (interval_ - it->second < intervals) {
          ++it;
          continue;
        }
        if (auto f = free_.find(it->first); f != free_.end()) {
          for (void* p : f->second) {
            blocks.push_back(p);
            sizes_.erase(p);
            kept_ -= static_cast<int64_t>(it->first);
          }
          free_.erase(f);
        }
        it = asked_.erase(it);
      }
      ++interval_;
    }
    for (void* p : blocks) c10::free_cpu(p);
  }

  void release() {
    std::vector<void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [size, list] : free_) {
        for (void* p : list) {
          blocks.push_back(p);
          sizes_.erase(p);
        }
      }
      free_.clear();
      asked_.clear();
      kept_ = 0;
    }
    for (void* p : blocks) c10::free_cpu(p);
  }

  CpuBlockCacheStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return CpuBlockCacheStats{kept_, in_use_, reuses_, static_cast<int64_t>(asked_.size())};
  }

  static BlockCache* instance;

 private:
  // A kept block of exactly `size` bytes, now in use; null when none is kept. Either way the size
  // was asked for in this interval.
  void* take_kept(size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    asked_[size] = interval_;
    auto it = free_.find(size);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* data = it->second.back();
    it->second.pop_back();
    kept_ -= static_cast<int64_t>(size);
    in_use_ += static_cast<int64_t>(size);
    ++reuses_;
    return data;
  }

  // Every block comes back here. A cached-size one freed on a thread in scope is kept for the
  // next step; freed elsewhere (frames the caller's sink let go of) it goes back to the system,
  // like every other block, so that nothing is kept between requests.
  static void give_back(void* data) {
    if (!data) return;
    BlockCache& c = *instance;
    {
      std::lock_guard<std::mutex> lock(c.mutex_);
      if (auto it = c.sizes_.find(data); it != c.sizes_.end()) {
        c.in_use_ -= static_cast<int64_t>(it->second);
        if (t_scopes > 0) {
          c.kept_ += static_cast<int64_t>(it->second);
          c.free_[it->second].push_back(data);
          c.asked_.emplace(it->second, c.interval_);  // a size kept is tracked until trimmed
          return;
        }
        c.sizes_.erase(it);
      }
    }
    c10::free_cpu(data);
  }

  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // by rounded size
  std::unordered_map<void*, size_t> sizes_;              // every block the cache made, in use or kept
  // By rounded size: the last interval (trim_cpu_block_cache) an allocation asked for it in; every
  // size with blocks kept has an entry, so a trim finds each.
  std::unordered_map<size_t, int64_t> asked_;
  int64_t interval_ = 0;
  int64_t kept_ = 0, in_use_ = 0, reuses_ = 0;
};

BlockCache* BlockCache::instance = nullptr;

}  // namespace

void install_cpu_block_cache() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Never destroyed: tensors in other statics may be freed after this one's destructor ran.
    BlockCache::instance = new BlockCache;
    c10::SetCPUAllocator(BlockCache::instance, /*priority=*/1);
  });
}

CpuBlockCacheScope::CpuBlockCacheScope() {
  ++t_scopes;
}
CpuBlockCacheScope::~CpuBlockCacheScope() {
  --t_scopes;
}

void release_cpu_block_cache() {
  if (BlockCache::instance) BlockCache::instance->release();
}

void trim_cpu_block_cache(int64_t intervals) {
  if (intervals < 1) {
    throw Error(ErrorKind::kInternal, "trim_cpu_block_cache: " + std::to_string(intervals) +
                                          " intervals (at least 1: the one ending)");
  }
  if (BlockCache::instance) BlockCache::instance->trim(intervals);
}

CpuBlockCacheStats cpu_block_cache_stats() {
  return BlockCache::instance ? BlockCache::instance->stats() : CpuBlockCacheStats{};
}

}  // namespace h3
