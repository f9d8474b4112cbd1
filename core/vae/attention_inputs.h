// The attention inputs of a decoder block from its fused projection: q and k RMS-normalised
// per head (no weight) and rotated (RoPE, rotate-half on the first rope_dim dims), v as is.
// On the CPU in fp32 one pass over the projection does the split, both norms, the rotation
// and the copy of v (the unfused ops make about ten passes); elsewhere the same maths in ATen ops.
#pragma once

#include <ATen/core/Tensor.h>

namespace h3::vae {

// A band of n rows, written into the caller's buffers: q, k, v [n, heads * head_dim]
// (contiguous rows; the decoder passes narrows of per-tile [S, heads * head_dim] buffers that it
// reuses from layer to layer) from qkv [n, 3 * heads * head_dim] (columns q | k | v, each
// head-major) and cos, sin [n, rope_dim]. v is copied out of the projection so that the
// projection is freed band by band and the attention reads v with the row stride of q and k.
void attention_inputs_into(const at::Tensor& qkv, int64_t heads, int64_t head_dim, const at::Tensor& cos,
                           const at::Tensor& sin, double eps, const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v);

// Rows [S, heads * head_dim] as the attention takes them, [1, heads, S, head_dim] (a view).
at::Tensor as_heads(const at::Tensor& rows, int64_t heads, int64_t head_dim);

}  // namespace h3::vae
