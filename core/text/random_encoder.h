// A text_encoder/ folder with seeded random weights in the release's layout (config.json with a
// text_config, model.language_model.* names, bf16 as released): the tiny default model's encoder
// and the benchmarks' larger ones. Whole language model (all layers and the final norm), no vision
// tower, no lm_head: the conditioning reads neither.
#pragma once

#include <cstdint>
#include <string>

#include "text/encoder_config.h"
#include "text/vision_config.h"

namespace h3::text {

// Writes `dir`/config.json and `dir`/model.safetensors. Embedding rows have unit variance (so that
// different prompts condition the DiT visibly differently); projections are scaled to keep the
// residual stream of order 1; norm weights are near 1.
// With `vision`, also a Qwen3-VL vision tower (config.json's vision_config and the image token
// ids, model.visual.* in fp32): weights N(0, 1 / fan-in), biases N(0, 0.01^2), norms 1 + N(0, 0.01^2),
// the position table N(0, 0.25^2). Its out_hidden_size must be the encoder's width.
void write_random_encoder(const std::string& dir, const EncoderConfig& c, uint64_t seed,
                          const VisionConfig* vision = nullptr);

}  // namespace h3::text
