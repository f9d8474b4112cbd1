// The FL2VA and Ref2VA stages (docs/conditioning.md): rank 0 puts the request's pictures onto the
// canvas (keyframes) or resizes them to their planned sizes (references) and every rank receives
// the pixels; the video VAE's encoder turns them into the condition blocks' latents (its tiles
// spread over the ranks); the vision tower (tensor-parallel, like the text encoder) into the
// features the prompt's presentation carries. The encoder and the tower are read on every rank by
// the first request with pictures and kept.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "dit/packed_sequence.h"
#include "engine/stages/stage.h"
#include "text/vision_prompt.h"
#include "text/vision_tower.h"

namespace h3::engine_detail {

struct KeyframePictures {
  // uint8 [height, width, 3] each, packed order: keyframes on the canvas, image references at
  // their planned sizes; a video reference [frames, height, width, 3] on 24 fps. An audio
  // reference has none.
  std::vector<at::Tensor> pixels;
  std::vector<dit::KeyframeAnchor> anchors;
  // Per picture, the index of its reference in the plan's references; -1 for a keyframe.
  std::vector<int64_t> reference;
  bool empty() const { return pixels.empty(); }
};

// Every rank: the plan's keyframes on the canvas, or its references at their sizes (empty for
// T2VA). `own` is rank 0's request as its caller gave it, with the pictures (a Job carries none);
// null on the other ranks.
KeyframePictures keyframe_pictures_stage(const StageContext& c, const GenerationRequest* own);

// Every rank: the normalised conditioning latents [1, C, 1, h, w] of each picture, fp32 CPU, the
// same on every rank (the release's recipe: posterior sample under seed 42, rounded to fp16).
std::vector<at::Tensor> keyframe_latents_stage(const StageContext& c, const KeyframePictures& k);

// Every rank: the vision tower's features of each keyframe and their patch grids, for the
// prompt's presentation (text/vision_prompt.h).
struct KeyframeVision {
  std::vector<text::VisionFeatures> features;
  std::vector<std::array<int64_t, 3>> grids;
  // Ref2VA's presentation of the references (one per planned reference, sound alone included);
  // FL2VA's keyframes' (one per picture, unused).
  std::vector<text::PresentedReference> references;
};
KeyframeVision keyframe_vision_stage(const StageContext& c, const KeyframePictures& k);

}  // namespace h3::engine_detail
