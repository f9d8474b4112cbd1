// The attention inputs of a decoder block from its fused projection: q and k RMS-normalised
// per head (no weight) and rotated (RoPE, rotate-half on the first rope_dim dims), v as is.
// On the CPU in fp32 one pass over the projection does the split, both norms and the rotation
// for q and k (the unfused ops make about ten passes); elsewhere the same maths in ATen ops.
#pragma once

#include <ATen/core/Tensor.h>

namespace h3::vae {

struct AttentionInputs {
  at::Tensor q, k,
      v;  // [1, heads, S, head_dim] each (views; strides as scaled_dot_product_attention takes them)
};

// qkv [S, 3 * heads * head_dim]: columns q | k | v, each head-major. cos, sin [S, rope_dim].
AttentionInputs attention_inputs(const at::Tensor& qkv, int64_t heads, int64_t head_dim,
                                 const at::Tensor& cos, const at::Tensor& sin, double eps);

}  // namespace h3::vae
