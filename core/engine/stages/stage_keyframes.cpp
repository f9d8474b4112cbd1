#include "engine/stages/stage_keyframes.h"

#include <ATen/ATen.h>

#include <array>
#include <string>

#include "dist/agree.h"
#include "engine/stages/reference_frames.h"
#include "engine/stages/reference_vision.h"
#include "h3/error.h"
#include "image/keyframes.h"

namespace h3::engine_detail {
namespace {

void ensure_vae_encoder(const StageContext& c) {
  dist::LocalFailure f;
  if (!c.parts.vae_encoder) {
    try {
      // Beside the decoder: on the rank's GPU with device = cuda.
      c.parts.vae_encoder.emplace(vae::VideoEncoder::load(c.model.vae_dir).to(c.parts.vae->device()));
    } catch (...) {
      f.capture();
    }
  }
  dist::agree_or_throw(c.group, f);
}

void ensure_vision_tower(const StageContext& c) {
  dist::LocalFailure f;
  if (!c.parts.vision) {
    try {
      if (!c.parts.prompt) {
        throw Error(ErrorKind::kInternal, "the vision tower needs the model's Qwen3-VL text encoder");
      }
      c.parts.vision.emplace(
          text::VisionTower::load(c.model.text_encoder_dir, &c.group, c.parts.prompt->options()));
    } catch (...) {
      f.capture();
    }
  }
  dist::agree_or_throw(c.group, f);
}

}  // namespace

KeyframePictures keyframe_pictures_stage(const StageContext& c, const GenerationRequest* own) {
  KeyframePictures k;
  const std::vector<Keyframe>& anchors = c.plan.keyframe_anchors;
  const std::vector<PlannedReference>& references = c.plan.references;
  if (anchors.empty() && references.empty()) return k;
  // Each picture's shape as every rank knows it from the plan: the canvas, or a reference's own
  // (a video's with its frames first).
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < anchors.size(); ++i)
    shapes.push_back({c.plan.canvas_height, c.plan.canvas_width, 3});
  k.reference.assign(anchors.size(), -1);
  for (size_t i = 0; i < references.size(); ++i) {
    const PlannedReference& r = references[i];
    if (r.kind == ReferenceKind::kAudio) continue;
    shapes.push_back(r.kind == ReferenceKind::kVideo ? std::vector<int64_t>{r.frames, r.height, r.width, 3}
                                                     : std::vector<int64_t>{r.height, r.width, 3});
    k.reference.push_back(static_cast<int64_t>(i));
  }
  dist::LocalFailure f;
  if (c.root()) {
    try {
      if (!own) throw Error(ErrorKind::kInternal, "rank 0 holds no request to take the pictures from");
      auto rgb8 = [](const Picture& pic) { return image::Rgb8{pic.width, pic.height, pic.rgb}; };
      auto tensor = [](image::Rgb8& p) {
        return at::from_blob(p.rgb.data(), {p.height, p.width, 3}, at::kByte).clone();
      };
      if (!anchors.empty()) {
        std::vector<image::Rgb8> given;
        for (Keyframe a : anchors)
          given.push_back(rgb8(a == Keyframe::kFirst ? own->first_frame : own->last_frame));
        for (image::Rgb8& p : image::onto_canvas(given, c.plan.canvas_width, c.plan.canvas_height))
          k.pixels.push_back(tensor(p));
      }
      for (at::Tensor& px : reference_pixels(own->references, references)) {
        if (px.defined()) k.pixels.push_back(std::move(px));
      }
    } catch (...) {
      f.capture();
    }
  }
  dist::agree_or_throw(c.group, f);
  for (size_t i = 0; i < shapes.size(); ++i) {
    at::Tensor t = c.root() ? k.pixels[i] : at::empty(shapes[i], at::kByte);
    t = t.to(c.group.device());
    c.group.broadcast(t, 0);
    if (c.root()) continue;
    k.pixels.push_back(t.to(at::kCPU).contiguous());
  }
  for (Keyframe a : anchors) {
    k.anchors.push_back(a == Keyframe::kFirst ? dit::KeyframeAnchor::kFirst : dit::KeyframeAnchor::kLast);
  }
  k.anchors.insert(k.anchors.end(), k.reference.size() - anchors.size(), dit::KeyframeAnchor::kReference);
  return k;
}

std::vector<at::Tensor> keyframe_latents_stage(const StageContext& c, const KeyframePictures& k) {
  std::vector<at::Tensor> out;
  if (k.empty()) return out;
  ensure_vae_encoder(c);
  for (size_t i = 0; i < k.pixels.size(); ++i) {
    const at::Tensor& pixels = k.pixels[i];
    // The release's fixed sample seed; an image [H, W, 3] -> [3, H, W], a video's planned 17n+5
    // frames [T, H, W, 3] -> [3, T, H, W].
    const at::Tensor z =
        pixels.dim() == 3
            ? c.parts.vae_encoder->encode_image(pixels.permute({2, 0, 1}), c.group)
            : c.parts.vae_encoder->encode_clip(
                  pixels.narrow(0, 0, c.plan.references[static_cast<size_t>(k.reference[i])].encoded_frames)
                      .permute({3, 0, 1, 2}),
                  c.group);
    out.push_back(z.to(at::kCPU, at::kFloat).contiguous());
  }
  return out;
}

KeyframeVision keyframe_vision_stage(const StageContext& c, const KeyframePictures& k) {
  KeyframeVision v;
  if (k.empty()) return v;
  ensure_vision_tower(c);
  std::vector<text::VisionInputs> inputs;
  std::vector<text::PresentedReference> shown(k.pixels.size());  // one per picture
  dist::LocalFailure f;
  try {
    for (size_t i = 0; i < k.pixels.size(); ++i)
      inputs.push_back(reference_vision_inputs(*c.parts.vision, k.pixels[i], &shown[i]));
  } catch (...) {
    f.capture();
  }
  dist::agree_or_throw(c.group, f);
  for (const text::VisionInputs& in : inputs) {
    v.features.push_back(c.parts.vision->forward(in));
    v.grids.push_back(in.grid_thw);
  }
  // Ref2VA: every reference in order, sound alone included; FL2VA: the keyframes.
  v.references = c.plan.references.empty() ? std::move(shown) : presentation_order(c.plan.references, shown);
  return v;
}

}  // namespace h3::engine_detail
