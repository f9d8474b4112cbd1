// The H3 ViT video decoder (docs/h3-model.md §7.2): one decoder call on one latent
// tile, fp32 on the weights' device (the CPU unless moved with to_device). Functional: the
// weights are plain tensors bound from the
// checkpoint by their diffusers names (the release's vae/ index); native
// checkpoints are converted to those names by h3::io::Weights at load.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "vae/config.h"

namespace h3::vae {

// One transformer block, as decode_tile reads it; the checkpoint keys each member comes from
// are declared in vae/decoder_tensors.cpp (and noted here).
struct BlockWeights {
  at::Tensor norm1_weight;   // norm1.weight [D]
  at::Tensor qkv_weight;     // attn.to_q/to_k/to_v.weight [D, D] each, stacked to [3D, D]
  at::Tensor qkv_bias;       // attn.to_q/to_k/to_v.bias [D] each, stacked to [3D]
  at::Tensor out_weight;     // attn.to_out.0.weight [D, D], rows multiplied by scale1 (folded at bind)
  at::Tensor out_bias;       // attn.to_out.0.bias [D] times scale1 (folded at bind)
  at::Tensor scale1;         // scale1 [D] (layer scale of the attention branch; already in out_*)
  at::Tensor norm2_weight;   // norm2.weight [D]
  at::Tensor ff_in_weight;   // ff.net.0.proj.weight [2F, D], rows [value; gate]
  at::Tensor ff_in_bias;     // ff.net.0.proj.bias [2F]
  at::Tensor ff_out_weight;  // ff.net.2.weight [D, F], rows multiplied by scale2 (folded at bind)
  at::Tensor ff_out_bias;    // ff.net.2.bias [D] times scale2 (folded at bind)
  at::Tensor scale2;         // scale2 [D] (already in ff_out_*)
};

struct DecoderWeights {
  at::Tensor post_quant_conv_weight;  // post_quant_conv.weight [C, C, 1, 1, 1], kept as [C, C]
  at::Tensor post_quant_conv_bias;    // post_quant_conv.bias [C]
  at::Tensor proj_in_weight;          // decoder.proj_in.weight [D, C]
  at::Tensor proj_in_bias;            // decoder.proj_in.bias [D]
  at::Tensor register_tokens;         // decoder.register_tokens [1, R, D], kept as [R, D]
  std::vector<BlockWeights> blocks;
  at::Tensor norm_out_weight;  // decoder.norm_out.weight [D]
  at::Tensor norm_out_bias;    // decoder.norm_out.bias [D]
  at::Tensor proj_out_weight;  // decoder.proj_out.weight [3*4*16*16, D]
  at::Tensor proj_out_bias;    // decoder.proj_out.bias [3*4*16*16]
};

// Binds the weights declared by decoder_tensors() (vae/decoder_tensors.h): `get(name)` returns
// the tensor of a diffusers name (any float dtype, any device: it is moved to fp32 CPU). Shapes
// are checked against the declaration; a wrong one is h3::Error(kMismatch) naming the tensor,
// its shape and the expected one. The layer scales are folded into the output projections of
// their branches (BlockWeights), so that each branch ends in one fused linear + residual add.
DecoderWeights bind_decoder_weights(const VaeConfig& c,
                                    const std::function<at::Tensor(const std::string&)>& get);

// The same weights on `device` (copies; the CUDA decode).
DecoderWeights to_device(const DecoderWeights& w, const c10::Device& device);

// The attention scores a CPU thread holds at once in decode_tile where the CPU's kernel choice
// takes the GEMM blocks (common/cpu_attention.h): 16 MiB of fp32, as the DiT's.
constexpr int64_t kAttentionScoreElements = int64_t(1) << 22;

// Decodes one latent tile of denormalised latents [C, t, h, w] (or [1, C, t, h, w]) to
// ImageNet-normalised pixels [3, 4t, 16h, 16w] (fp32). RoPE coordinates are local to
// the tile: each axis spans (i + 0.5) / n * 2 - 1.
at::Tensor decode_tile(const VaeConfig& c, const DecoderWeights& w, const at::Tensor& latent_tile);

}  // namespace h3::vae
