// The denoise stage: the request's seeded noise, drawn on rank 0 and broadcast so that every
// rank starts from the very same numbers, then N - 1 Euler steps of the tensor-parallel DiT
// with a cancel agreed after each; the final latents go to the caller's observer when asked.
#pragma once

#include <ATen/core/Tensor.h>

#include "engine/job.h"
#include "engine/stage.h"
#include "text/conditioning.h"

namespace h3::engine_detail {

// Every rank: the final video latents [1, C, T, h, w], fp32 CPU.
at::Tensor denoise_stage(const StageContext& c, const Job& job, const text::Conditioning& cond);

}  // namespace h3::engine_detail
