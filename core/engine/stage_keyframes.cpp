#include "engine/stage_keyframes.h"

#include <ATen/ATen.h>

#include <array>
#include <string>

#include "common/error.h"
#include "dist/agree.h"
#include "image/keyframes.h"

namespace h3::engine_detail {
namespace {

void ensure_vae_encoder(const StageContext& c) {
  dist::LocalFailure f;
  if (!c.parts.vae_encoder) {
    try {
      c.parts.vae_encoder.emplace(vae::VideoEncoder::load(c.model.vae_dir));
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
  const std::vector<std::string>& anchors = c.plan.keyframe_anchors;
  const std::vector<PlannedReference>& references = c.plan.references;
  if (anchors.empty() && references.empty()) return k;
  // Each picture's size as every rank knows it from the plan: the canvas, or a reference's own.
  std::vector<std::array<int64_t, 2>> sizes;  // (height, width)
  for (size_t i = 0; i < anchors.size(); ++i) sizes.push_back({c.plan.canvas_height, c.plan.canvas_width});
  for (const PlannedReference& r : references) sizes.push_back({r.height, r.width});
  dist::LocalFailure f;
  if (c.root()) {
    try {
      if (!own) throw Error(ErrorKind::kInternal, "rank 0 holds no request to take the pictures from");
      auto rgb8 = [](const Picture& pic) { return image::Rgb8{pic.width, pic.height, pic.rgb}; };
      std::vector<image::Rgb8> placed;
      if (!anchors.empty()) {
        std::vector<image::Rgb8> given;
        for (const std::string& a : anchors)
          given.push_back(rgb8(a == "first" ? own->first_frame : own->last_frame));
        placed = image::onto_canvas(given, c.plan.canvas_width, c.plan.canvas_height);
      } else {
        if (own->references.size() != references.size()) {
          throw Error(ErrorKind::kInternal, "rank 0's request and its plan disagree on the references");
        }
        // Stretched to the size the plan chose for it (its own aspect ratio, rounded to 32 px).
        for (size_t i = 0; i < references.size(); ++i) {
          placed.push_back(
              image::stretch_onto(rgb8(own->references[i]), references[i].width, references[i].height));
        }
      }
      for (image::Rgb8& p : placed) {
        k.pixels.push_back(at::from_blob(p.rgb.data(), {p.height, p.width, 3}, at::kByte).clone());
      }
    } catch (...) {
      f.capture();
    }
  }
  dist::agree_or_throw(c.group, f);
  for (size_t i = 0; i < sizes.size(); ++i) {
    at::Tensor t = c.root() ? k.pixels[i] : at::empty({sizes[i][0], sizes[i][1], 3}, at::kByte);
    t = t.to(c.group.device());
    c.group.broadcast(t, 0);
    if (c.root()) continue;
    k.pixels.push_back(t.to(at::kCPU).contiguous());
  }
  for (const std::string& a : anchors) {
    k.anchors.push_back(a == "first" ? dit::KeyframeAnchor::kFirst : dit::KeyframeAnchor::kLast);
  }
  k.anchors.insert(k.anchors.end(), references.size(), dit::KeyframeAnchor::kReference);
  return k;
}

std::vector<at::Tensor> keyframe_latents_stage(const StageContext& c, const KeyframePictures& k) {
  std::vector<at::Tensor> out;
  if (k.empty()) return out;
  ensure_vae_encoder(c);
  for (const at::Tensor& pixels : k.pixels) {
    // [H, W, 3] -> [3, H, W]: the encoder's image layout; the release's fixed sample seed.
    out.push_back(c.parts.vae_encoder->encode_image(pixels.permute({2, 0, 1}), c.group)
                      .to(at::kCPU, at::kFloat)
                      .contiguous());
  }
  return out;
}

KeyframeVision keyframe_vision_stage(const StageContext& c, const KeyframePictures& k) {
  KeyframeVision v;
  if (k.empty()) return v;
  ensure_vision_tower(c);
  std::vector<text::VisionInputs> inputs;
  dist::LocalFailure f;
  try {
    for (const at::Tensor& pixels : k.pixels) inputs.push_back(c.parts.vision->preprocess(pixels));
  } catch (...) {
    f.capture();
  }
  dist::agree_or_throw(c.group, f);
  for (const text::VisionInputs& in : inputs) {
    v.features.push_back(c.parts.vision->forward(in));
    v.grids.push_back(in.grid_thw);
  }
  return v;
}

}  // namespace h3::engine_detail
