// Full attention without a mask, softmax(q k^T / sqrt(D)) v, as two oneDNN GEMMs per head and
// block of query rows with an exact row softmax between them (fp32 on the CPU). The DiT spends
// most of its CPU time in attention, and LibTorch's fused
// scaled_dot_product_attention runs its flash kernel's 256 x 512 tiles through MKL's sgemm with a
// packing copy each: on this project's machines these GEMMs, whole rows of keys at once through the
// operators fused_linear.h uses, take about 0.55x its time at the DiT's shapes
// (docs/performance.md). The softmax is exact rather than online, so results differ from the
// fused kernel by rounding only. (The video VAE's attention, heads of 64, measured no faster this
// way and keeps the fused kernel.)
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace h3 {

// True when cpu_attention runs q, k, v: all on the CPU, this LibTorch has oneDNN's linear
// operators and the CPU's kernel choice for their dtype is the GEMM blocks (common/cpu_kernels.h:
// fp32 by default; bf16 only when forced). Otherwise the caller's fused kernel runs.
bool cpu_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// Query rows per block for `queries` rows over `keys` keys: the block's fp32 scores [rows, keys]
// hold at most `max_score_elements` (16 rows at least, 512 at most: past that the GEMMs gain
// nothing).
int64_t cpu_attention_block_rows(int64_t queries, int64_t keys, int64_t max_score_elements);

// The scores cpu_attention holds at once with `threads` intra-op threads.
int64_t cpu_attention_score_bytes(int64_t queries, int64_t keys, int64_t heads, int64_t max_score_elements,
                                  int threads);

// q [S, heads, D] against k, v [Sk, heads, D] -> [S, heads * D], one task per head and block of
// cpu_attention_block_rows(S, Sk, max_score_elements) rows, the intra-op threads sharing the
// tasks. Needs cpu_attention_applies(q, k, v). Beside the inputs it holds head-major copies of q
// (pre-scaled), k and v transposed, the output, and one block's fp32 scores per thread
// (cpu_attention_score_bytes).
at::Tensor cpu_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         int64_t max_score_elements);

}  // namespace h3
