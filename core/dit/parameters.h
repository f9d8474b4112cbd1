// The DiT checkpoint, declared once: for every tensor its canonical (diffusers) name, full
// shape, release dtype, tensor-parallel split and the member of DitWeights it binds to.
// Everything that names or shapes a DiT tensor follows from declare_parameters():
// dit_parameters() (checkpoint validation, `h3 inspect --shapes`, random weights, the
// full-size compatibility test, shapes only, `h3 bench load`'s checkpoint), and
// DitWeights::bind() and named() (the loader's splits and dtypes).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dit/config.h"
#include "io/types.h"

namespace h3::dit {

struct ParamSpec {
  std::string name;            // canonical (diffusers) name
  std::vector<int64_t> shape;  // full (unsharded) shape
  bool fp32 = false;           // stored in fp32 in the release (the 12 patch/time/head tensors); else bf16
  bool adaln = false;          // an AdaLN projection (blocks' adaln_proj.linear and norm_out.linear)
  // How tensor parallelism splits it (docs/h3-model.md §10.4): q/k/v and the AdaLN projection
  // by output rows, the gated FFN input per half, attention and FFN outputs by input columns
  // (their biases replicated), everything else replicated. The loader shards by this.
  io::Split split = io::Split::kReplicated;
  int64_t numel() const;
  // The shape one of `tp` ranks holds.
  std::vector<int64_t> local_shape(int tp) const;
};

// Calls fn(spec, slot) for every tensor, in a stable order (embedders, refiner, blocks, final
// layer); `slot` is the member of `w` (a DitWeights, const or not) the tensor binds to. The
// block counts are those of w.refiner and w.blocks; the shapes are `c`'s.
template <typename Weights, typename Fn>
void declare_parameters(const DitConfig& c, Weights& w, Fn&& fn) {
  using io::Split;
  const int64_t h = c.hidden_size, inner = c.inner_dim();
  auto one = [&](std::string name, std::vector<int64_t> shape, auto& slot, Split split = Split::kReplicated,
                 bool fp32 = false, bool adaln = false) {
    fn(ParamSpec{std::move(name), std::move(shape), fp32, adaln, split}, slot);
  };
  auto linear = [&](const std::string& n, auto& l, int64_t out, int64_t in, bool fp32, bool adaln = false,
                    Split split = Split::kReplicated) {
    one(n + ".weight", {out, in}, l.weight, split, fp32, adaln);
    one(n + ".bias", {out}, l.bias, split == Split::kColumn ? Split::kColumn : Split::kReplicated, fp32,
        adaln);
  };
  auto block = [&](const std::string& p, auto& b, bool adaln) {
    one(p + "norm1.weight", {h}, b.norm1);
    one(p + "attn.to_q.weight", {inner, h}, b.to_q, Split::kColumn);
    one(p + "attn.to_k.weight", {inner, h}, b.to_k, Split::kColumn);
    one(p + "attn.to_v.weight", {inner, h}, b.to_v, Split::kColumn);
    one(p + "attn.norm_q.weight", {c.head_dim}, b.norm_q);
    one(p + "attn.norm_k.weight", {c.head_dim}, b.norm_k);
    one(p + "attn.to_out.0.weight", {h, inner}, b.to_out, Split::kRow);
    one(p + "norm2.weight", {h}, b.norm2);
    one(p + "ff.net.0.proj.weight", {2 * c.ffn_dim, h}, b.ff_in, Split::kFusedColumn);
    one(p + "ff.net.2.weight", {h, c.ffn_dim}, b.ff_out, Split::kRow);
    if (adaln) {
      linear(p + "adaln_proj.linear", b.adaln, c.adaln_width(), c.time_embed_dim, false, true,
             Split::kColumn);
    }
  };
  linear("proj_in", w.proj_in, h, c.video_row_width(), true);
  linear("audio_proj_in", w.audio_proj_in, h, c.audio_in_channels, true);
  linear("context_embedder", w.context_embedder, h, c.text_dim, false);
  linear("time_embedder.linear_1", w.time_linear_1, c.time_embed_hidden_dim, c.freq_dim, true);
  linear("time_embedder.linear_2", w.time_linear_2, c.time_embed_dim, c.time_embed_hidden_dim, true);
  for (size_t i = 0; i < w.refiner.size(); ++i) {
    block("token_refiner.refiner_blocks." + std::to_string(i) + ".", w.refiner[i], false);
  }
  one("token_refiner.final_norm.weight", {h}, w.refiner_norm);
  for (size_t i = 0; i < w.blocks.size(); ++i) {
    block("transformer_blocks." + std::to_string(i) + ".", w.blocks[i], true);
  }
  one("norm_out.norm.weight", {h}, w.norm_out);
  linear("norm_out.linear", w.norm_out_linear, c.final_adaln_width(), c.time_embed_dim, false, true);
  linear("proj_out", w.proj_out, c.video_row_width(), h, true);
  linear("audio_proj_out", w.audio_proj_out, c.audio_in_channels, h, true);
}

// Every tensor of the model, in declaration order.
std::vector<ParamSpec> dit_parameters(const DitConfig& c);

struct ParamCount {
  int64_t total = 0;
  int64_t adaln = 0;
  int64_t release_bytes = 0;  // bytes in the release's dtypes (bf16, 12 tensors fp32)
};
ParamCount count_parameters(const std::vector<ParamSpec>& specs);

}  // namespace h3::dit
