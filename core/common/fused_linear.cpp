#include "common/fused_linear.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <optional>
#include <string_view>
#include <vector>

#include "common/cpu_kernels.h"
#include "common/op_profile.h"
#include "common/parallel_tasks.h"

namespace h3 {
namespace {

using Unary = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                         std::string_view, c10::List<std::optional<at::Scalar>>,
                         std::optional<std::string_view>);
using Binary = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                          const std::optional<at::Tensor>&, std::string_view);

// The operators, looked up once; absent (nullopt) when this LibTorch has no oneDNN or their
// signature changed, in which case the ATen path runs.
struct Ops {
  std::optional<c10::TypedOperatorHandle<Unary>> unary;
  std::optional<c10::TypedOperatorHandle<Binary>> binary;
};

const Ops& ops() {
  static const Ops o = [] {
    Ops r;
    try {
      if (auto h = c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", ""})) {
        r.unary = h->typed<Unary>();
      }
      if (auto h = c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", "binary"})) {
        r.binary = h->typed<Binary>();
      }
    } catch (const c10::Error&) {
      r = Ops{};
    }
    return r;
  }();
  return o;
}

bool fast(const at::Tensor& x, const at::Tensor& w) {
  // fp32 and bf16, as the CPU's kernel choice says (common/cpu_kernels.h: bf16 only where the CPU
  // multiplies it natively); CUDA, fp16 and double take ATen.
  if (!x.is_cpu() || !w.is_cpu() || x.scalar_type() != w.scalar_type() || !ops().unary || !ops().binary) {
    return false;
  }
  const at::ScalarType t = x.scalar_type();
  return (t == at::kFloat || t == at::kBFloat16) && cpu_kernels(t).gemm == GemmPath::kOnednnTiles;
}

std::optional<at::Tensor> opt(const at::Tensor& b) {
  return b.defined() ? std::optional<at::Tensor>(b) : std::nullopt;
}

at::Tensor unary(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, std::string_view attr) {
  return ops().unary->call(x, w, opt(b), attr, c10::List<std::optional<at::Scalar>>(), std::nullopt);
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

int64_t round_up(int64_t a, int64_t to) {
  return ceil_div(a, to) * to;
}

// The tiles of x W^T + b (and of `other`, for a binary post-op), each computed by `tile` on its
// rows of x, its rows of W (the output's columns) and its part of b and `other`, the threads
// sharing them. `attr` names the post-op for the binary operator; empty: unary `unary_attr`.
at::Tensor tiled(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& other,
                 std::string_view unary_attr, std::string_view binary_attr) {
  const int64_t k = x.size(-1), n = w.size(0);
  const at::Tensor x2 = x.reshape({-1, k}).contiguous();
  const at::Tensor wc = w.contiguous();
  const at::Tensor bc = b.defined() ? b.contiguous() : b;
  const at::Tensor o2 = other.defined() ? other.reshape({-1, n}) : other;
  const int64_t m = x2.size(0);
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = n;
  auto one = [&](const at::Tensor& xt, const at::Tensor& wt, const at::Tensor& bt, const at::Tensor& ot) {
    return ot.defined() ? ops().binary->call(xt, ot, wt, opt(bt), binary_attr)
                        : unary(xt, wt, bt, unary_attr);
  };
  const LinearTiles t = linear_tiles(m, k, n);
  if (t.row_tiles * t.col_tiles == 1) {
    at::Tensor out;
    run_tasks(1, [&](int64_t) { out = one(x2, wc, bc, o2.defined() ? o2.contiguous() : o2); });
    return out.view(out_shape);
  }
  at::Tensor out = at::empty({m, n}, x.options());
  run_tasks(t.row_tiles * t.col_tiles, [&](int64_t task) {
    const int64_t i0 = (task / t.col_tiles) * t.rows_per_tile, j0 = (task % t.col_tiles) * t.cols_per_tile;
    const int64_t r = std::min(t.rows_per_tile, m - i0), c = std::min(t.cols_per_tile, n - j0);
    const at::Tensor ot = o2.defined() ? o2.narrow(0, i0, r).narrow(1, j0, c).contiguous() : o2;
    out.narrow(0, i0, r).narrow(1, j0, c).copy_(
        one(x2.narrow(0, i0, r), wc.narrow(0, j0, c), bc.defined() ? bc.narrow(0, j0, c) : bc, ot));
  });
  return out.view(out_shape);
}

}  // namespace

LinearTiles linear_tiles(int64_t rows, int64_t in, int64_t out) {
  LinearTiles t;
  rows = std::max<int64_t>(rows, 1);
  out = std::max<int64_t>(out, 1);
  const int64_t macs = rows * std::max<int64_t>(in, 1) * out;
  const int64_t wanted = std::clamp<int64_t>(ceil_div(macs, kMacsPerTile), 1, kMaxTiles);
  // `tiles` blocks of about equal size, each of at least `least` (unless the dimension is
  // smaller), a multiple of `multiple`: rows of 16 (oneDNN's kernels take rows in blocks of that
  // order), columns of 64.
  auto block = [](int64_t n, int64_t tiles, int64_t least, int64_t multiple) {
    tiles = std::clamp<int64_t>(tiles, 1, std::max<int64_t>(1, n / least));
    return std::min(n, round_up(ceil_div(n, tiles), multiple));
  };
  // A row tile reads all of W, a column tile all of x: the larger of the two dimensions is split
  // first, so that the larger operand is read once (a few prompt tokens or timesteps against a
  // wide projection: W once, in column blocks; a long sequence: x once, in row blocks), and the
  // other only where its tiles are too few.
  if (rows >= out) {
    t.rows_per_tile = block(rows, wanted, kMinTileRows, 16);
    t.row_tiles = ceil_div(rows, t.rows_per_tile);
    t.cols_per_tile = block(out, wanted / t.row_tiles, kMinTileCols, 64);
    t.col_tiles = ceil_div(out, t.cols_per_tile);
  } else {
    t.cols_per_tile = block(out, wanted, kMinTileCols, 64);
    t.col_tiles = ceil_div(out, t.cols_per_tile);
    t.rows_per_tile = block(rows, wanted / t.col_tiles, kMinTileRows, 16);
    t.row_tiles = ceil_div(rows, t.rows_per_tile);
  }
  return t;
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  const OpTimer timer(OpKind::kLinear);
  if (fast(x, w)) return tiled(x, w, b, {}, "none", {});
  return at::linear(x, w, opt(b));
}

at::Tensor linear_silu(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  const OpTimer timer(OpKind::kLinear);
  if (fast(x, w)) return tiled(x, w, b, {}, "swish", {});
  return at::silu(at::linear(x, w, opt(b)));
}

at::Tensor linear_mul(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                      const at::Tensor& other) {
  const OpTimer timer(OpKind::kLinear);
  if (fast(x, w) && other.scalar_type() == x.scalar_type()) return tiled(x, w, b, other, {}, "mul");
  return at::linear(x, w, opt(b)).mul_(other);
}

at::Tensor linear_add(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                      const at::Tensor& other) {
  const OpTimer timer(OpKind::kLinear);
  if (fast(x, w) && other.scalar_type() == x.scalar_type()) return tiled(x, w, b, other, {}, "add");
  return at::linear(x, w, opt(b)).add_(other);
}

at::Tensor linear_in_task(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return unary(x, w, b, "none");
}

bool onednn_linear(const at::Tensor& x, const at::Tensor& w) {
  return fast(x, w);
}

const char* fused_linear_backend() {
  return ops().unary && ops().binary ? "oneDNN" : "ATen";
}

}  // namespace h3
