// CPU seconds of the calling thread, for the benches that run one rank per thread with one
// intra-op and one BLAS thread each: a rank's work then runs on its own thread, so this
// measures it apart from other load on a shared machine (the benches print wall time beside it).
#pragma once

#include <time.h>

namespace h3::tools {

inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace h3::tools
