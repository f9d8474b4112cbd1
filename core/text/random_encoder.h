// A text_encoder/ folder with seeded random weights in the release's layout (config.json with a
// text_config, model.language_model.* names, bf16 as released): the tiny default model's encoder
// and the benchmarks' larger ones. Whole language model (all layers and the final norm), no vision
// tower, no lm_head: the conditioning reads neither.
#pragma once

#include <cstdint>
#include <string>

#include "text/encoder_config.h"

namespace h3::text {

// Writes `dir`/config.json and `dir`/model.safetensors. Embedding rows have unit variance (so that
// different prompts condition the DiT visibly differently); projections are scaled to keep the
// residual stream of order 1; norm weights are near 1.
void write_random_encoder(const std::string& dir, const EncoderConfig& c, uint64_t seed);

}  // namespace h3::text
