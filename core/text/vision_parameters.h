// The Qwen3-VL vision tower's tensors, declared once: for every tensor its checkpoint name (the
// release's prefix model.visual.), full shape, tensor-parallel split and the member of
// VisionWeights it binds to. The loader (vision_tower.cpp), named() and the name check against
// the checkpoint layout (checkpoint_layout.cpp derives the same names for `h3 inspect`) follow
// from declare_vision_parameters().
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/types.h"
#include "text/vision_config.h"

namespace h3::text {

struct VisionBlockWeights {
  at::Tensor norm1_weight, norm1_bias, norm2_weight, norm2_bias;  // LayerNorm [hidden]
  at::Tensor qkv_weight, qkv_bias;  // fused [3 * local heads * head_dim, hidden]: this rank's q; k; v rows
  at::Tensor proj_weight;           // [hidden, local heads * head_dim]
  at::Tensor proj_bias;             // [hidden], whole: added after the all_reduce
  at::Tensor fc1_weight, fc1_bias;  // [local intermediate, hidden]
  at::Tensor fc2_weight;            // [hidden, local intermediate]
  at::Tensor fc2_bias;              // [hidden], whole
};

// The patch merger (2 x 2 patches -> one language-model token); a deepstack merger norms the merged
// patches (width hidden * merge^2), the final one each patch (width hidden) before merging.
struct VisionMergerWeights {
  at::Tensor norm_weight, norm_bias;
  at::Tensor fc1_weight, fc1_bias;  // [merged, merged]
  at::Tensor fc2_weight, fc2_bias;  // [out_hidden, merged]
};

struct VisionWeights {
  at::Tensor patch_weight;  // Conv3d [hidden, channels, temporal patch, patch, patch], whole
  at::Tensor patch_bias;    // [hidden]
  at::Tensor pos_embed;     // [num_position_embeddings, hidden]
  std::vector<VisionBlockWeights> blocks;
  VisionMergerWeights merger;
  std::vector<VisionMergerWeights> deepstack;  // one per deepstack_visual_indexes entry
};

struct VisionParameter {
  std::string name;            // checkpoint name
  std::vector<int64_t> shape;  // full (unsharded) shape
  // Tensor parallelism (over the heads and the MLP width): qkv by output rows, each of its
  // `parts` (q, k, v) split alike; fc1 by output rows; proj and fc2 by input columns. Norms,
  // biases added after a reduction, the patch embedding, the position table and the mergers whole.
  io::Split split = io::Split::kReplicated;
  int64_t parts = 1;  // kColumn only: dim 0 holds `parts` equal parts, each split
  int64_t numel() const;
};

// Calls fn(spec, slot) for every tensor of the tower; `w.blocks` and `w.deepstack` must be sized
// (config.depth, deepstack_visual_indexes.size()).
template <typename Weights, typename Fn>
void declare_vision_parameters(const VisionConfig& c, Weights& w, Fn&& fn) {
  using io::Split;
  const std::string p = "model.visual.";
  const int64_t W = c.hidden_size, F = c.intermediate_size, M = c.merged_width(), O = c.out_hidden_size;
  auto one = [&](std::string name, std::vector<int64_t> shape, auto& slot, Split split = Split::kReplicated,
                 int64_t parts = 1) {
    fn(VisionParameter{std::move(name), std::move(shape), split, parts}, slot);
  };
  one(p + "patch_embed.proj.weight", {W, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_size},
      w.patch_weight);
  one(p + "patch_embed.proj.bias", {W}, w.patch_bias);
  one(p + "pos_embed.weight", {c.num_position_embeddings, W}, w.pos_embed);
  for (size_t i = 0; i < w.blocks.size(); ++i) {
    const std::string b = p + "blocks." + std::to_string(i) + ".";
    auto& l = w.blocks[i];
    one(b + "attn.proj.bias", {W}, l.proj_bias);
    one(b + "attn.proj.weight", {W, W}, l.proj_weight, Split::kRow);
    one(b + "attn.qkv.bias", {3 * W}, l.qkv_bias, Split::kColumn, 3);
    one(b + "attn.qkv.weight", {3 * W, W}, l.qkv_weight, Split::kColumn, 3);
    one(b + "mlp.linear_fc1.bias", {F}, l.fc1_bias, Split::kColumn);
    one(b + "mlp.linear_fc1.weight", {F, W}, l.fc1_weight, Split::kColumn);
    one(b + "mlp.linear_fc2.bias", {W}, l.fc2_bias);
    one(b + "mlp.linear_fc2.weight", {W, F}, l.fc2_weight, Split::kRow);
    one(b + "norm1.bias", {W}, l.norm1_bias);
    one(b + "norm1.weight", {W}, l.norm1_weight);
    one(b + "norm2.bias", {W}, l.norm2_bias);
    one(b + "norm2.weight", {W}, l.norm2_weight);
  }
  auto merger = [&](const std::string& m, auto& mw, int64_t norm_width) {
    one(m + "linear_fc1.bias", {M}, mw.fc1_bias);
    one(m + "linear_fc1.weight", {M, M}, mw.fc1_weight);
    one(m + "linear_fc2.bias", {O}, mw.fc2_bias);
    one(m + "linear_fc2.weight", {O, M}, mw.fc2_weight);
    one(m + "norm.bias", {norm_width}, mw.norm_bias);
    one(m + "norm.weight", {norm_width}, mw.norm_weight);
  };
  merger(p + "merger.", w.merger, W);
  for (size_t j = 0; j < w.deepstack.size(); ++j)
    merger(p + "deepstack_merger_list." + std::to_string(j) + ".", w.deepstack[j], M);
}

// Every tensor of the tower, in declaration order.
std::vector<VisionParameter> vision_parameters(const VisionConfig& c);

}  // namespace h3::text
