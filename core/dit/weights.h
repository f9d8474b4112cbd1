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

#include "dit/adapter.h"
#include "dit/config.h"
#include "dit/parameters.h"

namespace h3::dit {

struct LinearWeights {
  at::Tensor weight;  // [out, in]
  at::Tensor bias;    // [out], or undefined
  Adapter lora;       // a LoRA on this layer (dit/lora.h), or empty
};

struct BlockWeights {
  at::Tensor norm1, norm2;      // [hidden]
  at::Tensor to_q, to_k, to_v;  // [heads_local * head_dim, hidden]
  at::Tensor norm_q, norm_k;    // [head_dim]
  at::Tensor to_out;            // [hidden, heads_local * head_dim]
  at::Tensor ff_in;             // ff.net.0.proj: [2 * ffn_local, hidden], rows [up; gate]
  at::Tensor ff_out;            // ff.net.2: [hidden, ffn_local]
  LinearWeights adaln;          // transformer blocks only: [18 * hidden / tp, time_embed_dim]
  // LoRA adapters on the projections (dit/lora.h), empty when none is attached.
  Adapter to_q_lora, to_k_lora, to_v_lora, to_out_lora, ff_in_lora, ff_out_lora;
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

// Calls fn(weight_name, adapter) for every linear layer a LoRA may adapt, `weight_name` being
// the canonical name of the layer's weight as declare_parameters names it (its split and shape
// are that declaration's): the patch and text projections, the time MLP, every block's q/k/v,
// out, FFN and AdaLN projections, the final AdaLN and the heads.
template <typename Weights, typename Fn>
void declare_adapters(Weights& w, Fn&& fn) {
  auto block = [&](const std::string& p, auto& b, bool adaln) {
    fn(p + "attn.to_q.weight", b.to_q_lora);
    fn(p + "attn.to_k.weight", b.to_k_lora);
    fn(p + "attn.to_v.weight", b.to_v_lora);
    fn(p + "attn.to_out.0.weight", b.to_out_lora);
    fn(p + "ff.net.0.proj.weight", b.ff_in_lora);
    fn(p + "ff.net.2.weight", b.ff_out_lora);
    if (adaln) fn(p + "adaln_proj.linear.weight", b.adaln.lora);
  };
  fn(std::string("proj_in.weight"), w.proj_in.lora);
  fn(std::string("audio_proj_in.weight"), w.audio_proj_in.lora);
  fn(std::string("context_embedder.weight"), w.context_embedder.lora);
  fn(std::string("time_embedder.linear_1.weight"), w.time_linear_1.lora);
  fn(std::string("time_embedder.linear_2.weight"), w.time_linear_2.lora);
  for (size_t i = 0; i < w.refiner.size(); ++i) {
    block("token_refiner.refiner_blocks." + std::to_string(i) + ".", w.refiner[i], false);
  }
  for (size_t i = 0; i < w.blocks.size(); ++i) {
    block("transformer_blocks." + std::to_string(i) + ".", w.blocks[i], true);
  }
  fn(std::string("norm_out.linear.weight"), w.norm_out_linear.lora);
  fn(std::string("proj_out.weight"), w.proj_out.lora);
  fn(std::string("audio_proj_out.weight"), w.audio_proj_out.lora);
}

}  // namespace h3::dit
