#include "common/cpu_attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include "common/cpu_kernels.h"
#include "common/fused_linear.h"
#include "common/parallel_tasks.h"

namespace h3 {

bool cpu_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return q.dim() == 3 && k.dim() == 3 && v.dim() == 3 && k.scalar_type() == q.scalar_type() &&
         v.scalar_type() == q.scalar_type() && q.is_cpu() && k.is_cpu() && v.is_cpu() &&
         (q.scalar_type() == at::kFloat || q.scalar_type() == at::kBFloat16) &&
         fused_linear_backend() == std::string_view("oneDNN") &&
         cpu_kernels(q.scalar_type()).attention == AttentionPath::kGemmBlocks;
}

int64_t cpu_attention_block_rows(int64_t queries, int64_t keys, int64_t max_score_elements) {
  const int64_t fit = max_score_elements / std::max<int64_t>(1, keys);
  return std::max<int64_t>(1, std::min(queries, std::clamp<int64_t>(fit, 16, 512)));
}

int64_t cpu_attention_score_bytes(int64_t queries, int64_t keys, int64_t heads, int64_t max_score_elements,
                                  int threads) {
  const int64_t block = cpu_attention_block_rows(queries, keys, max_score_elements);
  const int64_t tasks = heads * ((queries + block - 1) / block);
  return std::min<int64_t>(std::max(1, threads), tasks) * block * keys * static_cast<int64_t>(sizeof(float));
}

namespace {

// Both forms: every query against all keys, or (causal) query i against keys 0..i of as many.
at::Tensor blocked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             int64_t max_score_elements, bool causal) {
  const int64_t s = q.size(0), sk = k.size(0), heads = q.size(1), d = q.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  // Each head's rows contiguous: q pre-scaled [heads, S, D] (the GEMM's input), k [heads, Sk, D]
  // and v transposed [heads, D, Sk] (each the "weight" [out, in] of a linear: scores = q k^T,
  // out = p v).
  // (A fresh tensor for q: with one head the transposed view is contiguous already, and scaling
  // it in place would scale the caller's q.)
  const at::Tensor qh = at::empty({heads, s, d}, q.options());
  qh.copy_(q.transpose(0, 1)).mul_(scale);
  const at::Tensor kh = k.transpose(0, 1).contiguous();
  const at::Tensor vt = v.permute({1, 2, 0}).contiguous();
  at::Tensor out = at::empty({s, heads, d}, q.options());
  const int64_t block = cpu_attention_block_rows(s, sk, max_score_elements);
  const int64_t blocks = (s + block - 1) / block;
  // Causal: a block's rows see the keys up to its last row, and within its own square of keys
  // only those at or before their own (the strict upper triangle masked before the softmax).
  const at::Tensor future = causal ? at::ones({block, block}, at::kBool).triu_(1) : at::Tensor();
  // The intra-op threads share the (head, block) tasks and each runs its GEMMs on its own
  // (run_tasks): no GEMM is split across threads, so every output is summed in the same order at
  // any thread count (the ranks of one world give the same frames whether they are threads or
  // processes, which run different thread counts). The block does not shrink with more threads:
  // a GEMM's rows change its bits. One block's scores exist per running task.
  run_tasks(heads * blocks, [&](int64_t task) {
    const int64_t h = task / blocks, i0 = (task % blocks) * block, b = std::min(block, s - i0);
    const int64_t keys = causal ? i0 + b : sk;
    at::Tensor scores =
        linear_in_task(qh.select(0, h).narrow(0, i0, b), kh.select(0, h).narrow(0, 0, keys), {});
    if (causal) {
      scores.narrow(1, i0, b).masked_fill_(future.narrow(0, 0, b).narrow(1, 0, b),
                                           -std::numeric_limits<double>::infinity());
    }
    at::_softmax_out(scores, scores, -1, false);  // in place, row by row
    const at::Tensor vh = vt.select(0, h);
    out.narrow(0, i0, b).select(1, h).copy_(
        linear_in_task(scores, causal ? vh.narrow(1, 0, keys).contiguous() : vh, {}));
  });
  return out.view({s, heads * d});
}

}  // namespace

at::Tensor cpu_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         int64_t max_score_elements) {
  return blocked_attention(q, k, v, max_score_elements, false);
}

at::Tensor cpu_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                int64_t max_score_elements) {
  return blocked_attention(q, k, v, max_score_elements, true);
}

}  // namespace h3
