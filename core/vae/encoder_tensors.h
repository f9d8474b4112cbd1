// The video VAE encoder's checkpoint, declared once (like decoder_tensors.h): every tensor's
// diffusers name, its shape for a config, and where EncoderWeights keeps it. Binding
// (bind_encoder_weights) and its shape checks follow from encoder_tensors().
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "vae/config.h"
#include "vae/decoder_tensors.h"  // TensorRole

namespace h3::vae {

struct EncoderResnetWeights {
  at::Tensor norm1_weight, norm1_bias, conv1_weight, conv1_bias;
  at::Tensor norm2_weight, norm2_bias, conv2_weight, conv2_bias;
  at::Tensor shortcut_weight, shortcut_bias;  // 1x1x1; undefined when in == out channels
};

struct EncoderLevelWeights {
  std::vector<EncoderResnetWeights> resnets;
  at::Tensor down_weight, down_bias;  // undefined for a level that does not downsample
};

// fp32, contiguous, on one device (the CPU as bound); conv weights [out, in, kt, kh, kw] as stored.
struct EncoderWeights {
  at::Tensor conv_in_weight, conv_in_bias;
  std::vector<EncoderLevelWeights> levels;
  at::Tensor norm_out_weight, norm_out_bias;
  at::Tensor conv_out_weight, conv_out_bias;      // -> 2 * latent_channels (mean | logvar)
  at::Tensor quant_conv_weight, quant_conv_bias;  // 1x1x1, 2C -> 2C
};

struct EncoderTensor {
  std::string name;            // diffusers name
  std::vector<int64_t> shape;  // as stored in the checkpoint
  TensorRole role;
  // Where EncoderWeights keeps it: binding writes through it, to_device moves through it.
  std::function<at::Tensor&(EncoderWeights&)> slot;
};

// Every tensor of the encoder for `c` in a stable order: encoder.conv_in, each level's resnets
// (norm1, conv1, norm2, conv2, conv_shortcut where the channels change) and downsampler,
// encoder.norm_out, encoder.conv_out, quant_conv.
std::vector<EncoderTensor> encoder_tensors(const VaeConfig& c);

// Binds the encoder from `get` (a name -> tensor lookup; an undefined tensor is "missing").
// Shapes are checked against the declaration: a wrong one is h3::Error(kMismatch) naming the
// tensor, a missing one kNotFound.
EncoderWeights bind_encoder_weights(const VaeConfig& c,
                                    const std::function<at::Tensor(const std::string&)>& get);

// The same weights with every declared tensor on `device` (`w` as bound for `c`).
EncoderWeights to_device(const VaeConfig& c, const EncoderWeights& w, const c10::Device& device);

}  // namespace h3::vae
