#include "common/row_norm.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/parallel_tasks.h"
#include "h3/error.h"

namespace h3 {
namespace {

// Independent partial sums, so that the compiler can keep them in vector registers without
// reordering a sum itself (it may not, without -ffast-math).
constexpr int64_t kLanes = 16;
// Elements a task works on: tasks small enough to share between threads, large enough that
// handing one out costs nothing beside it.
constexpr int64_t kTaskElements = int64_t(1) << 15;

// 1 / sqrt(mean(x^2) + eps) of one row, in fp32 as ATen's composite computes it (the mean as the
// sum over n, eps as an fp32 value), the sum in another order.
float inverse_rms(const float* x, int64_t n, float eps) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += x[i + j] * x[i + j];
  }
  for (int64_t j = 0; i < n; ++i, ++j) acc[j] += x[i] * x[i];
  for (int64_t w = kLanes / 2; w > 0; w /= 2) {
    for (int64_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  }
  return 1.0f / std::sqrt(acc[0] / static_cast<float>(n) + eps);
}

// y = (x * r) * w over one row.
void normalise_row(const float* x, const float* w, float* y, int64_t n, float eps) {
  const float r = inverse_rms(x, n, eps);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * r) * w[i];
}

// Rows [0, rows) of n elements each, `row(r)` per row, shared between the intra-op threads.
template <typename RowFn>
void for_rows(int64_t rows, int64_t n, const RowFn& row) {
  const int64_t per_task = std::max<int64_t>(1, kTaskElements / std::max<int64_t>(1, n));
  const int64_t tasks = (rows + per_task - 1) / per_task;
  run_tasks(tasks, [&](int64_t t) {
    const int64_t end = std::min(rows, (t + 1) * per_task);
    for (int64_t r = t * per_task; r < end; ++r) row(r);
  });
}

at::Tensor fp32_vector(const at::Tensor& v, int64_t n, const char* what) {
  if (v.scalar_type() != at::kFloat || v.numel() != n || !v.device().is_cpu()) {
    throw Error(ErrorKind::kInternal, std::string("row_norm: ") + what + " must be " + std::to_string(n) +
                                          " fp32 values on the CPU");
  }
  return v.contiguous();
}

}  // namespace

bool row_norm_applies(const at::Tensor& x, const at::Tensor& weight) {
  return x.defined() && weight.defined() && x.device().is_cpu() && weight.device().is_cpu() &&
         x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat && x.dim() >= 1 &&
         x.size(-1) > 0 && weight.dim() == 1 && weight.size(0) == x.size(-1);
}

at::Tensor rms_norm_rows(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const auto xc = x.contiguous();
  const auto wc = fp32_vector(weight, x.size(-1), "the weight");
  auto y = at::empty_like(xc);
  const int64_t n = xc.size(-1), rows = n == 0 ? 0 : xc.numel() / n;
  const float *xp = xc.data_ptr<float>(), *wp = wc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const auto e = static_cast<float>(eps);
  for_rows(rows, n, [&](int64_t r) { normalise_row(xp + r * n, wp, yp + r * n, n, e); });
  return y;
}

at::Tensor rms_norm_affine_rows(const at::Tensor& x, const at::Tensor& weight, double eps,
                                const std::vector<RowAffine>& spans) {
  if (x.dim() != 2) throw Error(ErrorKind::kInternal, "rms_norm_affine_rows: x must be [rows, n]");
  const auto xc = x.contiguous();
  const int64_t rows = xc.size(0), n = xc.size(1);
  const auto wc = fp32_vector(weight, n, "the weight");
  // Each row's (1 + scale) and shift, as the composite computes them: 1 + scale once per span.
  std::vector<at::Tensor> held;
  std::vector<const float*> scale1_of(static_cast<size_t>(rows), nullptr), shift_of(scale1_of);
  for (const auto& s : spans) {
    if (s.start < 0 || s.length < 0 || s.start + s.length > rows) {
      throw Error(ErrorKind::kInternal, "rms_norm_affine_rows: a span [" + std::to_string(s.start) + ", +" +
                                            std::to_string(s.length) + ") outside " + std::to_string(rows) +
                                            " rows");
    }
    held.push_back(fp32_vector(s.scale, n, "a span's scale").add(1.0));
    held.push_back(fp32_vector(s.shift, n, "a span's shift"));
    const float* scale1 = held[held.size() - 2].data_ptr<float>();
    const float* shift = held.back().data_ptr<float>();
    std::fill_n(scale1_of.begin() + s.start, s.length, scale1);
    std::fill_n(shift_of.begin() + s.start, s.length, shift);
  }
  auto y = at::empty_like(xc);
  const float *xp = xc.data_ptr<float>(), *wp = wc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const auto e = static_cast<float>(eps);
  for_rows(rows, n, [&](int64_t r) {
    float* yr = yp + r * n;
    normalise_row(xp + r * n, wp, yr, n, e);
    const float *a = scale1_of[static_cast<size_t>(r)], *b = shift_of[static_cast<size_t>(r)];
    if (!a) return;
    for (int64_t i = 0; i < n; ++i) yr[i] = yr[i] * a[i] + b[i];
  });
  return y;
}

at::Tensor rms_norm_rope_rows(const at::Tensor& x, const at::Tensor& weight, double eps,
                              const at::Tensor& cos, const at::Tensor& sin) {
  if (x.dim() != 3) throw Error(ErrorKind::kInternal, "rms_norm_rope_rows: x must be [S, heads, D]");
  const auto xc = x.contiguous();
  const int64_t s = xc.size(0), heads = xc.size(1), d = xc.size(2);
  const auto wc = fp32_vector(weight, d, "the weight");
  const int64_t r = cos.size(-1), half = r / 2;
  if (r > d || r % 2 != 0 || cos.numel() != s * r || sin.numel() != s * r ||
      cos.scalar_type() != at::kFloat || sin.scalar_type() != at::kFloat) {
    throw Error(ErrorKind::kInternal,
                "rms_norm_rope_rows: cos and sin must be [S, 1, R] fp32 with even R <= D");
  }
  const auto cc = cos.contiguous(), sc = sin.contiguous();
  auto y = at::empty_like(xc);
  const float *xp = xc.data_ptr<float>(), *wp = wc.data_ptr<float>();
  const float *cp = cc.data_ptr<float>(), *sp = sc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const auto e = static_cast<float>(eps);
  for_rows(s * heads, d, [&](int64_t row) {
    float* yr = yp + row * d;
    normalise_row(xp + row * d, wp, yr, d, e);
    const float *c = cp + (row / heads) * r, *sn = sp + (row / heads) * r;
    for (int64_t i = 0; i < half; ++i) {
      const float lo = yr[i], hi = yr[i + half];
      yr[i] = lo * c[i] + (-hi) * sn[i];
      yr[i + half] = hi * c[i + half] + lo * sn[i + half];
    }
  });
  return y;
}

}  // namespace h3
