#include "common/fused_linear.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string_view>

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
  // fp32 only: LibTorch refuses oneDNN's bf16 linear on CPUs without AVX-512 (bf16 takes ATen,
  // as do CUDA, fp16 and double).
  return x.is_cpu() && w.is_cpu() && x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat &&
         ops().unary && ops().binary;
}

std::optional<at::Tensor> opt(const at::Tensor& b) {
  return b.defined() ? std::optional<at::Tensor>(b) : std::nullopt;
}

at::Tensor unary(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, std::string_view attr) {
  return ops().unary->call(x, w, opt(b), attr, c10::List<std::optional<at::Scalar>>(), std::nullopt);
}

}  // namespace

at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (fast(x, w)) return unary(x, w, b, "none");
  return at::linear(x, w, opt(b));
}

at::Tensor linear_silu(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (fast(x, w)) return unary(x, w, b, "swish");
  return at::silu(at::linear(x, w, opt(b)));
}

at::Tensor linear_mul(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                      const at::Tensor& other) {
  if (fast(x, w) && other.scalar_type() == x.scalar_type()) {
    return ops().binary->call(x, other, w, opt(b), "mul");
  }
  return at::linear(x, w, opt(b)).mul_(other);
}

at::Tensor linear_add(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                      const at::Tensor& other) {
  if (fast(x, w) && other.scalar_type() == x.scalar_type()) {
    return ops().binary->call(x, other, w, opt(b), "add");
  }
  return at::linear(x, w, opt(b)).add_(other);
}

bool onednn_linear(const at::Tensor& x, const at::Tensor& w) {
  return fast(x, w);
}

const char* fused_linear_backend() {
  return ops().unary && ops().binary ? "oneDNN" : "ATen";
}

}  // namespace h3
