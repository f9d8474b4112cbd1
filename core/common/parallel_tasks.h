// Work split into tasks whose results do not depend on the intra-op thread count. The intra-op
// threads take the tasks in turn, and inside a task every oneDNN or MKL call (and every ATen
// kernel: it runs its own parallel loops in order inside a parallel region) runs on one thread:
// a GEMM is never split between threads, so the bits of what a task computes depend on the task
// alone, not on how many threads there are or which one ran it. (oneDNN chooses how to split a
// GEMM, and so the order of its sums, from the thread count, also inside a thread of a parallel
// region, which runs it alone anyway; so does MKL. Both counts are set to one for the task's
// duration.)
// The ranks of one world run different thread counts (thread ranks share their process's cores,
// each `h3 worker` has its own), and they agree only because of this (docs/dit.md, "Linears").
#pragma once

#include <cstdint>
#include <functional>

namespace h3 {

// Runs task(0) .. task(count - 1), the calling thread's intra-op threads sharing them (each
// takes the next task not yet taken); returns when all ended. The first exception a task
// throws is rethrown here, after every running task ended. Inside a task, and when there is one
// thread, one task, or the caller is already in a parallel region (then the tasks run in order
// on the calling thread), each task runs with one intra-op thread. With a LibTorch that does not
// run its intra-op threads on OpenMP the tasks run in order on the calling thread.
void run_tasks(int64_t count, const std::function<void(int64_t)>& task);

// Whether run_tasks shares tasks between threads in this LibTorch (OpenMP intra-op threads).
bool run_tasks_in_parallel();

}  // namespace h3
