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

// Writes a random LoRA for `config` in RAVEN-Streaming's layout (docs/causal.md "LoRA"):
// `dir`/adapter_model.safetensors with keys base_model.model.dit.<native module>.lora_A.weight
// [rank, in] and .lora_B.weight [out, rank] over RAVEN's targets (every block's and refiner
// block's attn.qkv_proj, attn.out_proj, mlp.fc1, mlp.fc2; the blocks' and the final layer's
// AdaLN; the time MLP; the patch, text and head projections), A ~ N(0, 1/in), B ~ N(0, 0.05^2),
// and `dir`/adapter_config.json (r, lora_alpha, target_modules). For tests and benchmarks.
void write_random_lora(const std::string& dir, const DitConfig& config, int64_t rank, double alpha,
                       uint64_t seed);

}  // namespace h3::dit
