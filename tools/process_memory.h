// This process's resident memory from /proc/self/status, for the benchmarks that print it.
#pragma once

#include <malloc.h>

#include <fstream>
#include <string>

namespace h3::tools {

// A field of /proc/self/status (VmRSS: the current resident set, VmHWM: its peak) in MiB; 0 when
// it cannot be read.
inline double status_mib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string key = field;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(key.size())) / 1024.0;
  }
  return 0;
}

// Starts a new peak (VmHWM) from the current resident set (Linux: "5" to /proc/self/clear_refs).
inline void reset_peak_rss() {
  std::ofstream("/proc/self/clear_refs") << "5";
}

// What glibc's allocator holds, every arena together, in MiB: `in_use` the blocks handed out and
// not freed (its arenas' and its mmapped ones), `free` what its arenas keep free but mapped (what
// fragmentation or a high trim threshold leaves resident). Growth of the first is memory held;
// growth of the second with the first flat is the allocator's.
struct HeapMib {
  double in_use = 0, free = 0;
};
inline HeapMib heap_mib() {
  const struct mallinfo2 m = mallinfo2();
  constexpr double kMib = 1024.0 * 1024.0;
  return HeapMib{static_cast<double>(m.uordblks + m.hblkhd) / kMib, static_cast<double>(m.fordblks) / kMib};
}

}  // namespace h3::tools
