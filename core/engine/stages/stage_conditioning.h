// The conditioning stage: the request becomes the DiT's text rows (the model's own text encoder,
// every rank running its shard, or rank 0 reading a precomputed embeddings file), every rank
// agrees on the outcome, and the rows reach every rank.
#pragma once

#include "engine/stages/stage.h"
#include "engine/stages/stage_keyframes.h"
#include "text/conditioning.h"

namespace h3::engine_detail {

// The conditioning of a request that the model's text encoder does not encode: its embeddings
// file. Throws h3::Error(kInvalidArgument) for a prompt and an embeddings file together, or a
// prompt for a model without a text encoder of its own; as load_embeddings does for the file.
text::Conditioning condition(const ModelInfo& model, const GenerationRequest& req);
// Throws what condition() throws for the conditioning `req` names, before any work: for a
// request with a prompt, `model` must have a text encoder of its own; for one with keyframes, the
// model must have FL2VA's condition path (fl2va_missing).
void check_conditioning(const ModelInfo& model, const GenerationRequest& req);

// Every rank: rank 0's conditioning, agreed and broadcast. A cancel is agreed here too. With
// `keyframes` (FL2VA, the model's own text encoder) the prompt is presented with the keyframes'
// vision features (text/vision_prompt.h), every rank building the presentation from the job's
// prompt. With
// `free_text_encoder` (rank 0's option, carried by the job) every rank drops its encoder shard
// after encoding; the next prompt reloads it.
text::Conditioning conditioning_stage(const StageContext& c, const GenerationRequest& req,
                                      bool free_text_encoder, const KeyframeVision* keyframes = nullptr);

}  // namespace h3::engine_detail
