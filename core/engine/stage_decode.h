// The decode stage: the streaming VAE decode of the final latents over every rank, rank 0
// handing each chunk, trimmed to the requested frame count, to the caller's sink and waiting
// for it; a requested cancel stops the decode at a chunk boundary.
#pragma once

#include <ATen/core/Tensor.h>

#include "engine/stage.h"

namespace h3::engine_detail {

// Every rank: decodes `video` ([1, C, T, h, w] fp32 CPU, the same on every rank).
void decode_stage(const StageContext& c, const at::Tensor& video);

}  // namespace h3::engine_detail
