// Small value types shared by the weights loader, the layout conversion and the
// tensor-parallel shard plan (declared once so each header stays light).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>

namespace h3::io {

// How a canonical tensor is divided between the ranks of a tensor-parallel group.
enum class Split {
  kReplicated,   // every rank holds the whole tensor
  kColumn,       // dim 0 (output features) split in equal contiguous parts
  kRow,          // dim 1 (input features) split in equal contiguous parts; 2-D tensors only
  kFusedColumn,  // dim 0 holds two halves [a; b]: each half is split, a rank holds [a_r; b_r]
};

struct Shard {
  Split split = Split::kReplicated;
  int rank = 0;
  int size = 1;
};

struct LoadOptions {
  std::optional<at::ScalarType> dtype;  // convert while copying; default: the stored dtype
  c10::Device device = c10::Device(c10::kCPU);
};

enum class ModelKind { kDit, kVideoVae };

// What the layout conversion needs to know of the model: the attention heads
// (to de-interleave fused per-head qkv rows, and to check q/k/v shapes).
struct LayoutParams {
  ModelKind kind;
  int64_t num_heads;
  int64_t head_dim;
};

}  // namespace h3::io
