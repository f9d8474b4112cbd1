// The GEMM yardstick of the benchmarks: how long plain at::mm / at::bmm take for the matrix
// products a forward or a decode performs, so that a benchmark can print the fraction of that
// rate its whole run reaches (issue: GEMM-bound parts at >= 70 % of at::mm's rate).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace h3::tools {

// `count` products of [batch x] [m, k] @ [k, n] (batch 1 = a plain mm).
struct Gemm {
  int64_t batch = 1, m = 0, k = 0, n = 0;
  int64_t count = 1;
};

// Multiply-add FLOPs (2 m k n per product).
double gemm_flops(const std::vector<Gemm>& gemms);

// Seconds plain at::mm (at::bmm when batch > 1) takes for all of `gemms` on the calling thread's
// intra-op threads: each distinct shape timed (fastest of 3 after a warm-up) and multiplied by
// its count.
double at_mm_seconds(const std::vector<Gemm>& gemms);

// Prints "<what> GEMMs: F GFLOP; at::mm alone on the same shapes: S s (R GFLOP/s); this run: T s
// = P % of at::mm's rate" for a run that took `seconds`.
void print_gemm_rate(const std::string& what, const std::vector<Gemm>& gemms, double seconds);

}  // namespace h3::tools
