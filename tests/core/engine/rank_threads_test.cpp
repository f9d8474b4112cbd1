// The intra-op threads of each rank (engine/process/rank_threads.h): the cgroup CPU limit read as cgroup v2
// and v1 give it (on a folder laid out like /proc and /sys), the usable cores and each rank's share
// of them, and how many ranks of a world run on a rank's cores (threads pinned to disjoint CPUs).
#include "engine/process/rank_threads.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../text/text_test_util.h"
#include "dist/world.h"

namespace h3::engine_detail {
namespace {

namespace fs = std::filesystem;

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

// /proc/self/mountinfo lines: a cgroup2 hierarchy and v1's cpu one, as Docker and systemd lay them.
const std::string kMountV2 = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
const std::string kMountV1 =
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n";

TEST(RankThreads, TheCgroupLimitIsTheSmallestFromTheProcessesCgroupUp) {
  test::TempDir root("rank-threads");
  // v2: no limit where the process is, 1.5 cores above it, 4 at the top.
  write(root / "proc/self/cgroup", "0::/user.slice/app\n");
  write(root / "proc/self/mountinfo", "25 1 8:1 / / rw - ext4 /dev/sda1 rw\n" + kMountV2);
  write(root / "sys/fs/cgroup/user.slice/app/cpu.max", "max 100000\n");
  write(root / "sys/fs/cgroup/user.slice/cpu.max", "150000 100000\n");
  write(root / "sys/fs/cgroup/cpu.max", "400000 100000\n");
  EXPECT_DOUBLE_EQ(cgroup_cpu_limit(root.str()), 1.5);
  write(root / "sys/fs/cgroup/user.slice/cpu.max", "max 100000\n");
  EXPECT_DOUBLE_EQ(cgroup_cpu_limit(root.str()), 4.0);
  write(root / "sys/fs/cgroup/cpu.max", "max 100000\n");
  EXPECT_DOUBLE_EQ(cgroup_cpu_limit(root.str()), 0.0);  // none anywhere

  // v1 (this project's build machines): cpu.cfs_quota_us over cpu.cfs_period_us, -1 for none.
  write(root / "proc/self/cgroup", "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n0::/\n");
  write(root / "proc/self/mountinfo", kMountV1);
  write(root / "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "250000\n");
  write(root / "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  EXPECT_DOUBLE_EQ(cgroup_cpu_limit(root.str()), 2.5);
  write(root / "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
  EXPECT_DOUBLE_EQ(cgroup_cpu_limit(root.str()), 0.0);

  // A container's view: the hierarchy mounted from the process's own cgroup down.
  write(root / "proc/self/mountinfo",
        "32 31 0:29 /docker/abc /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu,cpuacct\n");
  write(root / "sys/fs/cgroup/cpu/cpu.cfs_quota_us", "50000\n");
  write(root / "sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_DOUBLE_EQ(cgroup_cpu_limit(root.str()), 0.5);

  // Nothing to read: no limit.
  test::TempDir empty("rank-threads-empty");
  EXPECT_DOUBLE_EQ(cgroup_cpu_limit(empty.str()), 0.0);
}

TEST(RankThreads, UsableCoresAreTheAffinityCappedByTheLimitRoundedUp) {
  EXPECT_EQ((UsableCores{4, 1.5}).count(), 2);
  EXPECT_EQ((UsableCores{2, 0}).count(), 2);
  EXPECT_EQ((UsableCores{8, 0.5}).count(), 1);
  EXPECT_EQ((UsableCores{2, 6}).count(), 2);
  EXPECT_EQ((UsableCores{4, 1.5}).describe(),
            "2 usable cores (affinity: 4 CPUs, cgroup CPU limit: 1.50 cores)");
  EXPECT_EQ((UsableCores{1, 0}).describe(), "1 usable core (affinity: 1 CPU, cgroup CPU limit: none)");
  EXPECT_EQ(threads_per_rank(2, 2), 1);
  EXPECT_EQ(threads_per_rank(16, 3), 5);
  EXPECT_EQ(threads_per_rank(1, 4), 1);
  EXPECT_EQ(describe_rank_threads(1, UsableCores{2, 0}, 2, false),
            "1 intra-op thread (2 usable cores (affinity: 2 CPUs, cgroup CPU limit: none), 2 ranks of the "
            "world on them)");
  EXPECT_EQ(
      describe_rank_threads(3, UsableCores{2, 0}, 1, true),
      "3 intra-op threads (as asked; 2 usable cores (affinity: 2 CPUs, cgroup CPU limit: none), 1 rank of "
      "the world on them)");
  // This process's own: its affinity mask's CPUs, at least one.
  EXPECT_GE(usable_cores().affinity, 1);
}

// Three ranks of one host: pinned to one CPU, ranks 0 and 1 share it and rank 2 has the other to
// itself; unpinned, all three share.
TEST(RankThreads, RanksOnTheSameCpusOfOneHostShareThem) {
  cpu_set_t all;
  CPU_ZERO(&all);
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &all)) cpus.push_back(c);
  for (bool pinned : {false, true}) {
    if (pinned && cpus.size() < 2) GTEST_SKIP() << "one CPU: ranks on disjoint CPUs need two";
    std::vector<int> sharing(3, 0);
    auto results = dist::run_threads(3, [&](dist::Group& g) {
      if (pinned) {  // this thread only (sched_setaffinity of thread id 0)
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[g.rank() == 2 ? 1 : 0], &one);
        ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
      }
      sharing[static_cast<size_t>(g.rank())] = ranks_sharing_cores(g);
    });
    for (const auto& r : results) ASSERT_TRUE(r.ok) << "rank " << r.rank << ": " << r.error;
    EXPECT_EQ(sharing, pinned ? (std::vector<int>{2, 2, 1}) : (std::vector<int>{3, 3, 3}));
  }
}

}  // namespace
}  // namespace h3::engine_detail
