// A LoRA adapter on one of the DiT's linear layers, applied the way RAVEN-Streaming applies its
// adapters: an fp32 activation residual beside the base layer, never merged into its (bf16)
// weight, so the base checkpoint stays bit for bit what was loaded and the adapter can be
// attached and detached at will (docs/causal.md "LoRA").
#pragma once

#include <ATen/core/Tensor.h>

namespace h3::dit {

struct Adapter {
  at::Tensor down;     // lora_A [r, in_local] fp32: the input columns this rank holds
  at::Tensor up;       // lora_B [out_local, r] fp32: the output rows this rank holds
  double scale = 0.0;  // alpha / r

  bool defined() const { return down.defined(); }
  // B(A(x.float())) * scale in fp32: [..., out_local].
  at::Tensor residual(const at::Tensor& x) const;
};

// base_out + adapter's residual of x, accumulated in fp32 and returned in base_out's dtype;
// base_out itself when the adapter is empty.
at::Tensor adapted(const at::Tensor& base_out, const Adapter& adapter, const at::Tensor& x);

}  // namespace h3::dit
