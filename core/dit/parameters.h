// The DiT's parameter set in canonical (diffusers) names, built from a config as shapes only:
// what a checkpoint must hold for the engine to run that config. Used to validate checkpoints,
// by `h3 inspect --shapes`, and by the full-size compatibility test (no memory needed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dit/config.h"

namespace h3::dit {

struct ParamSpec {
  std::string name;            // canonical (diffusers) name
  std::vector<int64_t> shape;  // full (unsharded) shape
  bool fp32 = false;           // stored in fp32 in the release (the 12 patch/time/head tensors); else bf16
  bool adaln = false;          // an AdaLN projection (blocks' adaln_proj.linear and norm_out.linear)
  int64_t numel() const;
};

// Every tensor of the model, in a stable order (embedders, refiner, blocks, final layer).
std::vector<ParamSpec> dit_parameters(const DitConfig& c);

struct ParamCount {
  int64_t total = 0;
  int64_t adaln = 0;
  int64_t release_bytes = 0;  // bytes in the release's dtypes (bf16, 12 tensors fp32)
};
ParamCount count_parameters(const std::vector<ParamSpec>& specs);

}  // namespace h3::dit
