#include "engine/process/rank_threads.h"

#include <ATen/ATen.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

namespace h3::engine_detail {
namespace {

constexpr int kMaskWords = CPU_SETSIZE / 64;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return in ? ss.str() : std::string();
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream ss(s);
  while (std::getline(ss, part, sep)) out.push_back(part);
  return out;
}

// The limit in one cgroup folder, in cores; 0: none there.
double limit_in(const std::string& dir, bool v2) {
  if (v2) {
    std::istringstream ss(read_text(dir + "/cpu.max"));
    std::string quota;
    double period = 0;
    if (!(ss >> quota >> period) || quota == "max" || period <= 0) return 0;
    try {
      return std::stod(quota) / period;
    } catch (const std::exception&) {
      return 0;
    }
  }
  std::istringstream q(read_text(dir + "/cpu.cfs_quota_us")), p(read_text(dir + "/cpu.cfs_period_us"));
  double quota = -1, period = 0;
  if (!(q >> quota) || !(p >> period) || quota <= 0 || period <= 0) return 0;
  return quota / period;
}

// The smallest limit from the cgroup `path` (as /proc/self/cgroup names it) up to its hierarchy's
// mount at `mount_point` (which shows the hierarchy from `mount_root` down).
double smallest_limit(const std::string& root, const std::string& mount_point, const std::string& mount_root,
                      std::string path, bool v2) {
  if (mount_root != "/") {
    if (path.compare(0, mount_root.size(), mount_root) != 0) return 0;  // not below what is mounted
    path = path.substr(mount_root.size());
  }
  double best = 0;
  for (;;) {
    const double l = limit_in(root + mount_point + (path == "/" ? "" : path), v2);
    if (l > 0 && (best == 0 || l < best)) best = l;
    if (path.empty() || path == "/") break;
    const size_t slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
  return best;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// What tells this host apart: its kernel's boot id (containers of one host share its cores and
// its boot id), else its name.
std::string host_identity() {
  std::string id = read_text("/proc/sys/kernel/random/boot_id");
  if (!id.empty()) return id;
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace

int UsableCores::count() const {
  int n = std::max(1, affinity);
  if (cgroup_limit > 0) n = std::min(n, std::max(1, static_cast<int>(std::ceil(cgroup_limit - 1e-9))));
  return n;
}

std::string UsableCores::describe() const {
  char limit[64];
  if (cgroup_limit > 0) {
    std::snprintf(limit, sizeof limit, "%.2f cores", cgroup_limit);
  } else {
    std::snprintf(limit, sizeof limit, "none");
  }
  const int n = count();
  return std::to_string(n) + (n == 1 ? " usable core" : " usable cores") +
         " (affinity: " + std::to_string(affinity) + (affinity == 1 ? " CPU" : " CPUs") +
         ", cgroup CPU limit: " + limit + ")";
}

double cgroup_cpu_limit(const std::string& root) {
  // Each line of /proc/self/cgroup: "ID:CONTROLLERS:PATH" (v2: "0::PATH").
  std::string v2_path, v1_path;
  for (const std::string& line : split(read_text(root + "/proc/self/cgroup"), '\n')) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) v2_path = path;
    for (const std::string& c : split(controllers, ','))
      if (c == "cpu") v1_path = path;
  }
  double best = 0;
  auto take = [&](double l) {
    if (l > 0 && (best == 0 || l < best)) best = l;
  };
  // Each line of /proc/self/mountinfo: "ID PARENT DEV ROOT MOUNT_POINT OPTIONS ... - TYPE SOURCE SUPER".
  for (const std::string& line : split(read_text(root + "/proc/self/mountinfo"), '\n')) {
    std::istringstream ss(line);
    std::vector<std::string> f;
    for (std::string w; ss >> w;) f.push_back(w);
    const auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 5 || dash == f.end() || dash + 1 == f.end()) continue;
    const std::string& type = *(dash + 1);
    if (type == "cgroup2" && !v2_path.empty()) take(smallest_limit(root, f[4], f[3], v2_path, true));
    if (type == "cgroup" && !v1_path.empty() && dash + 3 < f.end()) {
      for (const std::string& o : split(*(dash + 3), ','))
        if (o == "cpu") take(smallest_limit(root, f[4], f[3], v1_path, false));
    }
  }
  return best;
}

UsableCores usable_cores(const std::string& root) {
  UsableCores u;
  cpu_set_t set;
  CPU_ZERO(&set);
  u.affinity = sched_getaffinity(0, sizeof set, &set) == 0
                   ? CPU_COUNT(&set)
                   : std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  u.cgroup_limit = cgroup_cpu_limit(root);
  return u;
}

int threads_per_rank(int cores, int sharing) {
  return std::max(1, cores / std::max(1, sharing));
}

int cpu_threads_per_thread_rank(int ranks) {
  return threads_per_rank(usable_cores().count(), ranks);
}

std::string describe_rank_threads(int threads, const UsableCores& cores, int sharing, bool asked) {
  return std::to_string(threads) + (threads == 1 ? " intra-op thread (" : " intra-op threads (") +
         (asked ? "as asked; " : "") + cores.describe() + ", " + std::to_string(sharing) +
         (sharing == 1 ? " rank of the world on them)" : " ranks of the world on them)");
}

int ranks_sharing_cores(dist::Group& g) {
  // [host id, affinity mask words]: int64 on the group's device (NCCL gathers on the GPU).
  std::vector<int64_t> mine(1 + kMaskWords, 0);
  mine[0] = static_cast<int64_t>(fnv1a(host_identity()));
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &set);  // unknown: it may share any
  }
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set))
      mine[static_cast<size_t>(1 + c / 64)] |= static_cast<int64_t>(uint64_t(1) << (c % 64));
  }
  const at::Tensor t = at::tensor(mine, at::kLong).to(g.device());
  int sharing = 0;
  for (const at::Tensor& other : g.all_gather(t)) {
    const at::Tensor o = other.to(at::kCPU).contiguous();
    const int64_t* p = o.data_ptr<int64_t>();
    if (p[0] != mine[0]) continue;
    bool overlap = false;
    for (int w = 1; w <= kMaskWords && !overlap; ++w) overlap = (p[w] & mine[static_cast<size_t>(w)]) != 0;
    if (overlap) ++sharing;
  }
  return std::max(1, sharing);
}

}  // namespace h3::engine_detail
