// Compiled with OpenMP (core/common/meson.build): the only file of the engine that opens a
// parallel region itself. (ATen's at::parallel_for is a header template that runs serially in a
// file compiled without OpenMP.)
#include "common/parallel_tasks.h"

#include <ATen/Config.h>
#include <ATen/Parallel.h>
#include <c10/util/ParallelGuard.h>
#include <dlfcn.h>

#include <atomic>
#include <exception>
#include <mutex>

#if AT_PARALLEL_OPENMP && defined(_OPENMP)
#include <omp.h>
#define H3_TASKS_OPENMP 1
#else
#define H3_TASKS_OPENMP 0
#endif

namespace h3 {
namespace {

#if H3_TASKS_OPENMP
// MKL's own count for the calling thread (LibTorch sets it beside OpenMP's, and MKL consults it
// first), looked up at run time: a LibTorch without MKL has none. It returns the previous count.
// (MKL_Set_Num_Threads_Local is the C function mkl.h's mkl_set_num_threads_local names; the
// lower-case symbol is Fortran's, which takes a pointer.)
using SetLocalThreads = int (*)(int);
SetLocalThreads mkl_local_threads() {
  static const auto fn = reinterpret_cast<SetLocalThreads>(dlsym(RTLD_DEFAULT, "MKL_Set_Num_Threads_Local"));
  return fn;
}

// One OpenMP and one MKL thread for what runs in this scope on this thread (both are per-thread
// settings: they change neither the other threads nor, once restored, the caller's).
class OneThread {
 public:
  OneThread() : saved_omp_(omp_get_max_threads()) {
    omp_set_num_threads(1);
    if (auto set = mkl_local_threads()) saved_mkl_ = set(1);
  }
  ~OneThread() {
    omp_set_num_threads(saved_omp_);
    if (auto set = mkl_local_threads()) set(saved_mkl_);  // 0: back to MKL's process-wide count
  }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_omp_;
  int saved_mkl_ = 0;
};
#endif

void run_in_order(int64_t count, const std::function<void(int64_t)>& task) {
#if H3_TASKS_OPENMP
  OneThread one;
#endif
  c10::ParallelGuard in_region(true);
  for (int64_t i = 0; i < count; ++i) task(i);
}

}  // namespace

bool run_tasks_in_parallel() {
  return H3_TASKS_OPENMP != 0;
}

void run_tasks(int64_t count, const std::function<void(int64_t)>& task) {
  if (count <= 0) return;
#if H3_TASKS_OPENMP
  at::internal::lazy_init_num_threads();
  const int threads = at::get_num_threads();
  if (count == 1 || threads <= 1 || at::in_parallel_region()) {
    run_in_order(count, task);
    return;
  }
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  // No num_threads clause (LibTorch avoids it for a GOMP thread-pool bug): the team is the
  // calling thread's intra-op threads; those that find no task left return at once.
#pragma omp parallel
  {
    // ATen sets a thread's OpenMP count to the process's intra-op count the first time the
    // thread uses ATen's threading (a pool thread's first at::parallel_for or get_num_threads):
    // that must happen before the count is set to one here, not inside a task after it. Both
    // copies of that first use: LibTorch's own (get_num_threads, in its library) and the inline
    // one of the files built here.
    (void)at::get_num_threads();
    at::internal::lazy_init_num_threads();
    at::internal::ThreadIdGuard tid(omp_get_thread_num());
    c10::ParallelGuard in_region(true);
    OneThread one;
    for (int64_t i = next++; i < count && !failed.load(); i = next++) {
      try {
        task(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        failed = true;
      }
    }
  }
  if (first_error) std::rethrow_exception(first_error);
#else
  run_in_order(count, task);
#endif
}

}  // namespace h3
