// Large CPU blocks kept for reuse between the DiT's steps (docs/dit.md, "CPU memory allocation").
//
// glibc hands every block over its mmap threshold (at most 32 MiB, often less) to mmap and gives
// it back to the kernel on free, so each large activation of every step is page-faulted in again:
// on the end-to-end race's medium model a tenth of the first frame's time. The cache is LibTorch's
// CPU allocator for the engine's rank threads (a thread opts in with CpuBlockCacheScope; every
// other thread keeps LibTorch's default): a freed block of at least kCachedBlockMin bytes is kept
// and handed to the next allocation of the same rounded size, which is what the next step asks
// for. Exact sizes only, so nothing fragments. Only a block freed on a thread in scope is kept
// (one the caller's sink lets go of goes back to the system), and the engine releases the kept
// blocks when a phase ends (the denoising before the decode, a request at its end), so what is
// kept never outlives the phase whose sizes it serves.
#pragma once

#include <cstddef>
#include <cstdint>

namespace h3 {

// Blocks under this go to LibTorch's default allocator (glibc serves them from its arenas).
constexpr size_t kCachedBlockMin = size_t{1} << 20;

// Installs the cache as LibTorch's CPU allocator, once per process (the engine's rank servers
// do); later calls do nothing. Every CPU tensor allocated after it, on any thread, is this
// allocator's (outside a scope it allocates and frees as LibTorch's default does, without the
// default's memory-profiler reports), and every free takes one mutex to look the block up.
void install_cpu_block_cache();

// While one lives on a thread, that thread's large CPU allocations go through the cache (which
// install_cpu_block_cache() must have installed). Nests.
class CpuBlockCacheScope {
 public:
  CpuBlockCacheScope();
  ~CpuBlockCacheScope();
  CpuBlockCacheScope(const CpuBlockCacheScope&) = delete;
  CpuBlockCacheScope& operator=(const CpuBlockCacheScope&) = delete;
};

// Gives every kept (free) block back to the system. Blocks in use are untouched and return to
// the cache when freed.
void release_cpu_block_cache();

// Ends an interval of a phase that never ends (an endless stream's chunks: one call after each)
// and gives back the kept blocks of every size that no allocation in scope asked for in the last
// `intervals` intervals (this one included). A phase whose sizes change as it goes (a prompt of
// another length changes the KV cache's rows and every attention's) would otherwise keep a set
// of blocks per size it ever asked for until it ends, which an endless stream never does.
// `intervals` >= 1.
void trim_cpu_block_cache(int64_t intervals);

// Bytes the cache keeps free for reuse, and bytes of cached-size blocks in use (tests, benchmarks).
struct CpuBlockCacheStats {
  int64_t kept_bytes = 0;
  int64_t in_use_bytes = 0;
  int64_t reuses = 0;  // allocations served from a kept block since start
  int64_t sizes = 0;   // sizes the cache tracks: those with blocks kept or asked for since the last trim
};
CpuBlockCacheStats cpu_block_cache_stats();

}  // namespace h3
