// The C allocator's setting of `h3 bench dit`, which measures the DiT's kernels rather than the
// kernel's page faults.
#pragma once

#include <malloc.h>

namespace h3::tools {

// glibc hands every block over its mmap threshold (at most 32 MiB, often less) to mmap and back
// to the kernel on free, so each large activation of every DiT step is page-faulted in again
// (docs/dit.md, "CPU memory allocation"). Serving every block from the heap and keeping what is
// freed there lets the next step reuse it, but what the heap cannot coalesce stays resident: on
// the tiny model a long clip's peak grew by up to 480 MiB (docs/dit.md). The engine keeps only
// its DiT steps' blocks instead (common/cpu_block_cache.h); the bench, one forward's process,
// takes the setting.
inline void keep_freed_memory_in_heap() {
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace h3::tools
