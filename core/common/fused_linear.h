// Linear layers with the elementwise step after them fused in. On the CPU they run on oneDNN
// through LibTorch's own `mkldnn::_linear_pointwise` operators (the kernels torch.compile emits
// for CPU linears; the PyPI wheel's oneDNN reaches a higher fp32 rate than its MKL sgemm behind
// at::linear on this project's machines, and the fused post-op saves a pass over the output).
// On other devices, or a LibTorch built without oneDNN, the plain ATen ops compute the same.
//
// On oneDNN the output is cut into tiles (linear_tiles: fixed by the GEMM's shape alone), each
// one single-threaded oneDNN GEMM, and the intra-op threads share the tiles (run_tasks): no
// GEMM is split between threads, so the bits do not depend on the thread count. oneDNN splits
// one large GEMM differently at different thread counts (on AVX2 at 3 or 4 threads against 1,
// for instance), and the ranks of one world, which run different counts, must agree.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace h3 {

// x W^T + b (b may be undefined); x [..., K], W [N, K].
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);
// silu(x W^T + b)
at::Tensor linear_silu(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);
// (x W^T + b) * other and (x W^T + b) + other; `other` has the output's shape.
at::Tensor linear_mul(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& other);
at::Tensor linear_add(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& other);

// x W^T + b as one GEMM on the calling thread alone, for a caller whose own tasks share the
// threads (inside a run_tasks task: cpu_attention). Needs onednn_linear(x, w).
at::Tensor linear_in_task(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);

// True when linear(x, w, b) runs on oneDNN: both on the CPU in fp32, or in bf16 where the CPU's
// kernel choice takes oneDNN for it (common/cpu_kernels.h), and the operators present.
bool onednn_linear(const at::Tensor& x, const at::Tensor& w);

// "oneDNN" when the CPU path has the fused operators, else "ATen" (benchmarks print it).
const char* fused_linear_backend();

// How linear cuts an [rows, out] output of `in` inputs into tiles: row blocks of `rows_per_tile`
// rows (the last one shorter) times column blocks of `cols_per_tile` columns (the last narrower).
// About one tile per kMacsPerTile multiply-adds, at most kMaxTiles, none under kMinTileRows x
// kMinTileCols (unless the output is): a single-threaded oneDNN GEMM of 16-64 rows runs at
// 45-75 % of its rate on 256 or more (docs/performance.md, "Thread-count independence, and
// process ranks on one host"). The larger
// of rows and outputs is split first (the other operand then is read once per tile).
struct LinearTiles {
  int64_t rows_per_tile = 0, cols_per_tile = 0;
  int64_t row_tiles = 0, col_tiles = 0;
};
constexpr int64_t kMacsPerTile = int64_t(1) << 26;  // 67 M multiply-adds: about 1 ms on one core
constexpr int64_t kMaxTiles = 64;
constexpr int64_t kMinTileRows = 256, kMinTileCols = 256;
LinearTiles linear_tiles(int64_t rows, int64_t in, int64_t out);

}  // namespace h3
