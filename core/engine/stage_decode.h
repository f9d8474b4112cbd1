// The decode stage: the streaming VAE decode of the final latents over every rank, rank 0
// handing each chunk, trimmed to the requested frame count, to the caller's sink and waiting
// for it; a requested cancel stops the decode at a chunk boundary. When the request asked for
// audio, rank 0 also decodes the soundtrack's stretch that goes with each chunk and hands it
// over together with the chunk (docs/engine.md "Audio").
#pragma once

#include <ATen/core/Tensor.h>

#include "engine/stage.h"

namespace h3::engine_detail {

// Every rank, before a request that asks for audio: rank 0 loads the audio decoder from the
// model's audio_vae/ unless it holds it already; a failure is agreed (every rank throws it).
void load_audio_decoder(const StageContext& c);

// Every rank: decodes `video` ([1, C, T, h, w] fp32 CPU, the same on every rank). `audio_rows`
// ([2A, 32] fp32 CPU, rank 0's is read) is decoded with it when defined; load_audio_decoder()
// must have run.
void decode_stage(const StageContext& c, const at::Tensor& video, const at::Tensor& audio_rows = {});

}  // namespace h3::engine_detail
