// Seeded random decoder weights in the diffusers names: the tiny decoders of the
// tests and the benchmark decoder come from the same code as the real one,
// only their tensors are random.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

#include "vae/config.h"

namespace h3::vae {

// Every tensor decode uses, scaled so that activations stay O(1) through the
// blocks and the output spreads over the pixel range (some of it clamped).
std::map<std::string, at::Tensor> random_decoder_tensors(const VaeConfig& c, uint64_t seed);

// Every tensor of the CNN encoder and quant_conv (encoder_tensors(c)): convolutions N(0, 1 / fan-in),
// biases N(0, 0.01^2), GroupNorm gains 1 + N(0, 0.01^2).
std::map<std::string, at::Tensor> random_encoder_tensors(const VaeConfig& c, uint64_t seed);

// A small config in the release's shape (24 latent channels, 4 x 16 x 16 patches,
// clip 17, token drop 3, tiles 256/64) with a decoder of the given size.
VaeConfig small_config(int64_t layers, int64_t heads, int64_t head_dim, uint64_t stats_seed = 7);

}  // namespace h3::vae
