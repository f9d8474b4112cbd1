#include "dit/adapter.h"

#include <ATen/ATen.h>

#include "common/fused_linear.h"

namespace h3::dit {

at::Tensor Adapter::residual(const at::Tensor& x) const {
  auto xf = x.scalar_type() == at::kFloat ? x : x.to(at::kFloat);
  return h3::linear(h3::linear(xf, down, {}), up, {}).mul_(scale);
}

at::Tensor adapted(const at::Tensor& base_out, const Adapter& adapter, const at::Tensor& x) {
  if (!adapter.defined()) return base_out;
  auto sum = base_out.to(at::kFloat).add(adapter.residual(x));
  return sum.scalar_type() == base_out.scalar_type() ? sum : sum.to(base_out.scalar_type());
}

}  // namespace h3::dit
