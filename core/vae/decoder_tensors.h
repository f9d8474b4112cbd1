// The video VAE decoder's checkpoint, declared once: every tensor's diffusers name, its shape
// for a config, and where DecoderWeights keeps it. Binding (bind_decoder_weights), the shape
// checks and the random weights of tests and the tiny model (random_weights.cpp) all follow
// from decoder_tensors().
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "vae/config.h"

namespace h3::vae {

struct DecoderWeights;

enum class TensorRole {
  kLinearWeight,  // [out, in, ...]: fan-in is dim 1
  kBias,
  kNormWeight,  // RMS/LayerNorm gain, near 1
  kLayerScale,  // scale1 / scale2
  kRegisterTokens,
};

struct DecoderTensor {
  std::string name;            // diffusers name
  std::vector<int64_t> shape;  // as stored in the checkpoint
  TensorRole role;
  // Puts the tensor (fp32, CPU, contiguous, of `shape`) where decode_tile reads it.
  std::function<void(DecoderWeights&, const at::Tensor&)> store;
};

// Every tensor of the decoder for `c`, in a stable order: post_quant_conv, proj_in, register
// tokens, each block (norm1, to_q/to_k/to_v weight and bias, to_out.0, scale1, norm2,
// ff.net.0.proj, ff.net.2, scale2), norm_out, proj_out.
std::vector<DecoderTensor> decoder_tensors(const VaeConfig& c);

}  // namespace h3::vae
