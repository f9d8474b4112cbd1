#include "engine/stages/reference_vision.h"

#include <ATen/ATen.h>

#include "engine/stages/reference_frames.h"
#include "h3/error.h"
#include "image/keyframes.h"

namespace h3 {

text::VisionInputs reference_vision_inputs(const text::VisionTower& tower, const at::Tensor& pixels,
                                           text::PresentedReference* shown) {
  if (pixels.dim() == 3) {
    text::VisionInputs in = tower.preprocess(pixels);
    *shown = {false, in.grid_thw, {}};
    return in;
  }
  // A video: the frames the conditioner reads at 2 fps, a block per pair.
  const std::vector<int64_t> read = conditioner_frames(pixels.size(0));
  const at::Tensor index =
      at::from_blob(const_cast<int64_t*>(read.data()), {static_cast<int64_t>(read.size())}, at::kLong);
  text::VisionInputs in = tower.preprocess_video(pixels.index_select(0, index));
  *shown = {true, in.grid_thw, block_seconds(static_cast<int64_t>(read.size()))};
  return in;
}

std::vector<text::PresentedReference> presentation_order(const std::vector<PlannedReference>& planned,
                                                         const std::vector<text::PresentedReference>& shown) {
  std::vector<text::PresentedReference> out;
  size_t picture = 0;
  for (const PlannedReference& r : planned) {
    text::PresentedReference p;
    if (r.kind == ReferenceKind::kAudio) {
      p.audio_only = true;
    } else {
      if (picture >= shown.size())
        throw Error(ErrorKind::kInternal, "presentation: fewer pictures than references");
      p = shown[picture++];
    }
    p.sound = r.audio_latents > 0;
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<at::Tensor> reference_pixels(const std::vector<Reference>& references,
                                         const std::vector<PlannedReference>& planned) {
  if (references.size() != planned.size()) {
    throw Error(ErrorKind::kInternal, "the request and its plan disagree on the references");
  }
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < references.size(); ++i) {
    const Reference& ref = references[i];
    if (ref.is_audio()) {
      out.emplace_back();
    } else if (ref.is_video()) {
      out.push_back(normalized_video(ref.video, planned[i]));
    } else {
      // Stretched to the size the plan chose for it (its own aspect ratio, rounded to 32 px).
      image::Rgb8 p = image::stretch_onto({ref.image.width, ref.image.height, ref.image.rgb},
                                          planned[i].width, planned[i].height);
      out.push_back(at::from_blob(p.rgb.data(), {p.height, p.width, 3}, at::kByte).clone());
    }
  }
  return out;
}

}  // namespace h3
