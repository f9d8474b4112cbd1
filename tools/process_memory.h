// This process's resident memory from /proc/self/status, for the benchmarks that print it.
#pragma once

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

}  // namespace h3::tools
