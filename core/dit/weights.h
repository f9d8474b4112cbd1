// The DiT's weights as plain tensors bound to their canonical (diffusers) checkpoint names.
// Under tensor parallelism each rank's struct holds only its shards of the split tensors
// (docs/h3-model.md §10.4): to_q/to_k/to_v and ff.net.0.proj by rows, to_out.0 and ff.net.2 by
// columns, adaln_proj.linear by rows with its bias; everything else whole.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "dit/config.h"
#include "dit/parameters.h"

namespace h3::dit {

struct LinearWeights {
  at::Tensor weight;  // [out, in]
  at::Tensor bias;    // [out], or undefined
};

struct BlockWeights {
  at::Tensor norm1, norm2;      // [hidden]
  at::Tensor to_q, to_k, to_v;  // [heads_local * head_dim, hidden]
  at::Tensor norm_q, norm_k;    // [head_dim]
  at::Tensor to_out;            // [hidden, heads_local * head_dim]
  at::Tensor ff_in;             // ff.net.0.proj: [2 * ffn_local, hidden], rows [up; gate]
  at::Tensor ff_out;            // ff.net.2: [hidden, ffn_local]
  LinearWeights adaln;          // transformer blocks only: [18 * hidden / tp, time_embed_dim]
  int64_t local_heads(int64_t head_dim) const { return to_q.size(0) / head_dim; }
};

struct DitWeights {
  LinearWeights proj_in, audio_proj_in, context_embedder;
  LinearWeights time_linear_1, time_linear_2;
  std::vector<BlockWeights> refiner;
  at::Tensor refiner_norm;
  std::vector<BlockWeights> blocks;
  at::Tensor norm_out;
  LinearWeights norm_out_linear;
  LinearWeights proj_out, audio_proj_out;

  // Fills every tensor declared by declare_parameters (dit/parameters.h) from `get(spec)`,
  // which returns this rank's tensor (shard or whole: the spec says how it splits and whether
  // it stays fp32), and checks its shape against the declaration for a group of `tp` ranks.
  static DitWeights bind(const DitConfig& c, int tp, const std::function<at::Tensor(const ParamSpec&)>& get);

  // Every tensor with its canonical name (this rank's shards).
  std::vector<std::pair<std::string, at::Tensor>> named() const;
};

}  // namespace h3::dit
