// Linear layers with the elementwise step after them fused in. On the CPU they run on oneDNN
// through LibTorch's own `mkldnn::_linear_pointwise` operators (the kernels torch.compile emits
// for CPU linears; the PyPI wheel's oneDNN reaches a higher fp32 rate than its MKL sgemm behind
// at::linear on this project's machines, and the fused post-op saves a pass over the output).
// On other devices, or a LibTorch built without oneDNN, the plain ATen ops compute the same.
#pragma once

#include <ATen/core/Tensor.h>

namespace h3 {

// x W^T + b (b may be undefined); x [..., K], W [N, K].
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);
// silu(x W^T + b)
at::Tensor linear_silu(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);
// (x W^T + b) * other and (x W^T + b) + other; `other` has the output's shape.
at::Tensor linear_mul(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& other);
at::Tensor linear_add(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& other);

// True when linear(x, w, b) runs on oneDNN: both on the CPU in fp32 and the operators present.
bool onednn_linear(const at::Tensor& x, const at::Tensor& w);

// "oneDNN" when the CPU path has the fused operators, else "ATen" (benchmarks print it).
const char* fused_linear_backend();

}  // namespace h3
