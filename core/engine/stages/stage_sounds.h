// Ref2VA's sound (docs/conditioning.md): rank 0 cuts each reference's sound (an audio
// reference's, a video's soundtrack) to the clip's duration, puts it on the audio VAE's rate and
// encodes it with the VAE's encoder (read there by the first request with sound and kept); every
// rank receives the normalised rows the DiT conditions on.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "engine/stages/stage.h"

namespace h3::engine_detail {

// Every rank: one entry per planned reference, in packed order: its sound's rows [2·A, C] fp32
// CPU (A = PlannedReference::audio_latents), or an undefined tensor where it has none. `own` is
// rank 0's request as its caller gave it (a Job carries no media); null on the other ranks.
std::vector<at::Tensor> reference_sounds_stage(const StageContext& c, const GenerationRequest* own);

}  // namespace h3::engine_detail
