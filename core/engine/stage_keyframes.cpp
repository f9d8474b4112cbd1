#include "engine/stage_keyframes.h"

#include <ATen/ATen.h>

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
  if (anchors.empty()) return k;
  const int64_t w = c.plan.canvas_width, h = c.plan.canvas_height;
  dist::LocalFailure f;
  if (c.root()) {
    try {
      if (!own) throw Error(ErrorKind::kInternal, "rank 0 holds no request to take the keyframes from");
      std::vector<image::Rgb8> given;
      for (const std::string& a : anchors) {
        const Picture& pic = a == "first" ? own->first_frame : own->last_frame;
        given.push_back({pic.width, pic.height, pic.rgb});
      }
      for (image::Rgb8& p : image::onto_canvas(given, w, h)) {
        k.pixels.push_back(at::from_blob(p.rgb.data(), {h, w, 3}, at::kByte).clone());
      }
    } catch (...) {
      f.capture();
    }
  }
  dist::agree_or_throw(c.group, f);
  for (size_t i = 0; i < anchors.size(); ++i) {
    at::Tensor t = c.root() ? k.pixels[i] : at::empty({h, w, 3}, at::kByte);
    t = t.to(c.group.device());
    c.group.broadcast(t, 0);
    if (c.root()) continue;
    k.pixels.push_back(t.to(at::kCPU).contiguous());
  }
  for (const std::string& a : anchors) {
    k.anchors.push_back(a == "first" ? dit::KeyframeAnchor::kFirst : dit::KeyframeAnchor::kLast);
  }
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
