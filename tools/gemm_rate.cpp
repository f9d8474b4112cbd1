#include "tools/gemm_rate.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <tuple>

namespace h3::tools {

double gemm_flops(const std::vector<Gemm>& gemms) {
  double f = 0;
  for (const Gemm& g : gemms) {
    f += 2.0 * static_cast<double>(g.count * g.batch * g.m) * static_cast<double>(g.k * g.n);
  }
  return f;
}

double at_mm_seconds(const std::vector<Gemm>& gemms) {
  using Clock = std::chrono::steady_clock;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, int64_t> counts;  // one timing per shape
  for (const Gemm& g : gemms) counts[{g.batch, g.m, g.k, g.n}] += g.count;
  double total = 0;
  for (const auto& [shape, count] : counts) {
    const auto [batch, m, k, n] = shape;
    const at::Tensor a = at::randn({batch, m, k}), b = at::randn({batch, k, n});
    at::Tensor c = at::empty({batch, m, n});
    auto once = [&] {
      if (batch == 1) {
        at::Tensor c0 = c[0];
        at::mm_out(c0, a[0], b[0]);
      } else {
        at::bmm_out(c, a, b);
      }
    };
    once();
    double best = 1e30;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = Clock::now();
      once();
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    total += best * static_cast<double>(count);
  }
  return total;
}

void print_gemm_rate(const std::string& what, const std::vector<Gemm>& gemms, double seconds) {
  const double flops = gemm_flops(gemms), mm = at_mm_seconds(gemms);
  std::printf(
      "%s GEMMs: %.1f GFLOP; at::mm alone on the same shapes: %.3f s (%.1f GFLOP/s); this run: %.3f s = %.0f "
      "%% of at::mm's rate\n",
      what.c_str(), flops / 1e9, mm, flops / mm / 1e9, seconds, 100.0 * mm / seconds);
}

}  // namespace h3::tools
