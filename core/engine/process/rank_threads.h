// How many intra-op threads a rank runs: the cores its process may use (its affinity mask, and
// its cgroup's CPU limit) shared among the ranks of its world that run on the same cores. Thread
// ranks share their process's cores; the processes of one world on one host (rank 0 and its
// `h3 worker`s) find each other by the host's boot id and their affinity masks, all-gathered when
// the world forms. Without this every process ran as many threads as the host has cores: on a
// 2-core host rank 0 and one worker ran 4 busy threads on 2 cores, 13x slower than 2 thread ranks.
#pragma once

#include <string>

#include "dist/group.h"

namespace h3::engine_detail {

// The cores this process may use.
struct UsableCores {
  int affinity = 1;         // CPUs in its affinity mask (sched_getaffinity)
  double cgroup_limit = 0;  // its cgroup's CPU limit in cores (cpu.max, or cfs quota / period); 0: none
  // min(affinity, the limit rounded up), at least 1.
  int count() const;
  // e.g. "2 usable cores (affinity: 2 CPUs, cgroup CPU limit: none)"
  std::string describe() const;
};

// This process's usable cores. `root` prefixes /proc and /sys (tests give a folder of their own).
UsableCores usable_cores(const std::string& root = "");

// The CPU limit of this process's cgroup and its ancestors (the smallest), in cores: cgroup v2's
// cpu.max ("max" or "QUOTA PERIOD"), or v1's cpu.cfs_quota_us / cpu.cfs_period_us (-1: none),
// found through /proc/self/cgroup and /proc/self/mountinfo. 0 when there is none or it cannot be read.
double cgroup_cpu_limit(const std::string& root = "");

// The threads of each of `sharing` ranks on `cores` cores: an even share, at least one.
int threads_per_rank(int cores, int sharing);

// The intra-op threads of each thread rank of a world of `ranks`: this process's usable cores
// shared among them.
int cpu_threads_per_thread_rank(int ranks);

// The line a process world's rank states when its world forms: e.g. "1 intra-op thread (2 usable
// cores (affinity: 2 CPUs, cgroup CPU limit: none), 2 ranks of the world on them)"; `asked`: the
// count was given (h3 worker --threads) rather than chosen.
std::string describe_rank_threads(int threads, const UsableCores& cores, int sharing, bool asked);

// How many ranks of `g` (this one included) run on this host on CPUs this process may use too:
// one all_gather of each rank's boot id (/proc/sys/kernel/random/boot_id, else its host name) and
// affinity mask. A collective: every rank of g calls it.
int ranks_sharing_cores(dist::Group& g);

}  // namespace h3::engine_detail
