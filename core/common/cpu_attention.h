// Attention, softmax(q k^T / sqrt(D)) v, whole (the DiT's, the video VAE's) or causal (the text
// encoder's), as two oneDNN GEMMs per head and block of query rows with an exact row softmax
// between them, fp32 or bf16 on the CPU where the CPU's kernel choice takes it
// (common/cpu_kernels.h). LibTorch's fused scaled_dot_product_attention runs its flash kernel's
// tiles through MKL's sgemm (fp32) or its bf16 GEMM without AMX: on an AVX2 EPYC and on an
// AVX-512 EPYC (Zen 5) these GEMMs, whole rows of keys at once through the operators
// fused_linear.h uses, take 0.53-0.55x its time at the DiT's shapes in fp32 and about a third in
// bf16 (docs/performance.md). The softmax is exact rather than online, so fp32 results differ
// from the fused kernel by rounding only; bf16's scores are rounded to bf16 before it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace h3 {

// True when cpu_attention runs q, k, v: all on the CPU, this LibTorch has oneDNN's linear
// operators and the CPU's kernel choice for their dtype is the GEMM blocks (common/cpu_kernels.h:
// fp32 outside Intel's AVX-512 CPUs, bf16 on AVX512_BF16 without AMX). Otherwise the caller's
// fused kernel runs.
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

// The causal form (the text encoder's): q, k, v [S, heads, D], query i against keys 0..i; each
// block of queries multiplies only the keys up to its last row. Needs cpu_attention_applies.
at::Tensor cpu_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                int64_t max_score_elements);

}  // namespace h3
