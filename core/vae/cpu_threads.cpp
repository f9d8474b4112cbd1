#include "vae/cpu_threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>

namespace h3::vae {

void set_cpu_threads(int n) {
  n = std::max(1, n);
  at::set_num_threads(n);
  // Looked up at run time: LibTorch may run on another BLAS, where the symbol is absent.
  using SetThreads = void (*)(int);
  if (void* sym = dlsym(RTLD_DEFAULT, "openblas_set_num_threads")) {
    reinterpret_cast<SetThreads>(sym)(n);
  }
}

}  // namespace h3::vae
