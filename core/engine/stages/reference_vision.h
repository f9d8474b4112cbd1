// What the Qwen3-VL vision tower reads of each Ref2VA reference and how the prompt's presentation
// labels it (docs/conditioning.md): shared by the engine's vision stage and `h3 encode-prompt
// --reference`, so that embeddings written ahead give the engine's own clip.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "h3/request.h"
#include "text/vision_prompt.h"
#include "text/vision_tower.h"

namespace h3 {

// The tower's inputs for one reference's pixels (an image [H, W, 3]; a video [T, H, W, 3] on
// 24 fps, of which the conditioner reads every 12th frame) and, in `shown`, its presentation.
text::VisionInputs reference_vision_inputs(const text::VisionTower& tower, const at::Tensor& pixels,
                                           text::PresentedReference* shown);

// Every planned reference's presentation in order: a pictured one's from `shown` (one per picture,
// in order), sound alone as its label only; each with "<Audio j>: " when it carries sound.
std::vector<text::PresentedReference> presentation_order(const std::vector<PlannedReference>& planned,
                                                         const std::vector<text::PresentedReference>& shown);

// Each reference as the encoders see it, by its plan: an image stretched to its planned size
// uint8 [h, w, 3], a video normalized_video [T, h, w, 3]; undefined for sound alone.
std::vector<at::Tensor> reference_pixels(const std::vector<Reference>& references,
                                         const std::vector<PlannedReference>& planned);

}  // namespace h3
