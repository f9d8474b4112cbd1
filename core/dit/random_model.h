// A transformer folder with seeded random weights for a config (config.json in the diffusers
// schema + one diffusion_pytorch_model.safetensors), as the release lays it out: for tests of
// configs the golden model does not cover (e.g. 4+ heads for TP 4) and for benchmarks.
#pragma once

#include <cstdint>
#include <string>

#include "dit/config.h"

namespace h3::dit {

// Writes `dir`/config.json and `dir`/diffusion_pytorch_model.safetensors (fp32). Weights are
// scaled so that activations stay of order 1 through the blocks.
void write_random_transformer(const std::string& dir, const DitConfig& config, uint64_t seed);

}  // namespace h3::dit
