// A model folder as the engine sees it, read without touching the weights: the release layout
// (model_index.json, transformer/, vae/, audio_vae/, scheduler/, audio_scheduler/, text_encoder/,
// tokenizer/) or the tiny default's (the same, with gst-h3 request defaults in model_index.json
// under "gst_h3"; an older tiny folder may hold the byte encoder in text_encoder/).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dit/config.h"
#include "engine/request.h"
#include "text/vision_config.h"
#include "vae/config.h"

namespace h3 {

struct ModelDefaults {
  // §11 of docs/h3-model.md for the release: 16:9 canvas 1344x768, 124 frames, 50 grid points.
  int64_t width = 1344, height = 768, num_frames = 124, steps = 50;
};

struct ModelInfo {
  std::string dir;
  std::string transformer_dir, vae_dir;
  std::string text_encoder_dir;  // empty when the folder has none
  std::string audio_vae_dir;     // empty when the folder has no audio_vae/ (no soundtrack)
  bool byte_encoder = false;     // text_encoder/ holds the byte encoder (text/byte_encoder.h)
  bool prompt_encoder = false;   // text_encoder/ (Qwen3-VL) and tokenizer/: a prompt conditions it
  dit::DitConfig dit;
  vae::VaeConfig vae;
  double video_shift = 12.0, audio_shift = 3.0;  // scheduler/ and audio_scheduler/ "shift"
  // The audio VAE's waveform (audio_vae/ config): samples per second and per latent. 0 when the
  // folder has no audio VAE, or its config cannot be read (the decoder's load says why).
  int64_t audio_rate = 0, audio_hop = 0;
  ModelDefaults defaults;
  // The tasks the checkpoint partition was released for (model_index.json "_minimax_h3" "tasks",
  // as the native FL2VA/ and Ref2VA/ folders say: "t2va", "fl2va", "ref2va"); empty where the
  // index does not say (the diffusers layout, the tiny models).
  std::vector<std::string> tasks;
  // The text encoder's vision tower (text_encoder/config.json's vision_config), read once with the
  // configs; absent: `vision_missing` says why (no Qwen3-VL encoder, no vision_config, or one that
  // cannot describe a tower).
  std::optional<text::VisionConfig> vision;
  std::string vision_missing;
};

// Reads and cross-checks the configs. Throws h3::Error: kNotFound (no folder, no
// model_index.json, no transformer/ or vae/ config), kFormat (unreadable JSON), kMismatch
// (transformer and VAE disagree), each naming the file and what to fix.
ModelInfo read_model(const std::string& dir);

// Why `m` cannot condition on keyframes (FL2VA), or empty when it can: its partition lists no
// "fl2va" task, its VAE checkpoint holds no encoder, or (unless the prompt comes as precomputed
// embeddings, `embeddings`) its text encoder has no vision tower. Reads safetensors headers only.
std::string fl2va_missing(const ModelInfo& m, bool embeddings);

// Throws h3::Error(kNotFound) naming <dir>/audio_vae when the model cannot make a soundtrack.
void require_audio_vae(const ModelInfo& m);

// FL2VA: checks the request's pictures (kInvalidArgument naming first-frame / last-frame and the
// source), records their anchors in `p` and, when the request gives no size, sets p.width and
// p.height to the canvas of the first picture's aspect ratio. Nothing for a T2VA request.
void plan_keyframes(const ModelInfo& m, const GenerationRequest& req, ClipPlan& p);

// Resolves 0 fields to the model's defaults and validates the request's numbers.
ClipPlan make_plan(const ModelInfo& m, const GenerationRequest& req);

}  // namespace h3
