// A model folder as the engine sees it, read without touching the weights: the release layout
// (model_index.json, transformer/, vae/, audio_vae/, scheduler/, audio_scheduler/, text_encoder/,
// tokenizer/) or the tiny default's (the same, with gst-h3 request defaults in model_index.json
// under "gst_h3").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dit/config.h"
#include "engine/model/task_ask.h"
#include "h3/request.h"
#include "text/vision_config.h"
#include "vae/config.h"

namespace h3 {

struct ModelDefaults {
  // §11 of docs/h3-model.md for the release: 16:9 canvas 1344x768, 124 frames, 50 grid points.
  int64_t width = 1344, height = 768, num_frames = 124, steps = 50;
  // Ref2VA: the short edge an image reference is encoded at, whatever the canvas (the release:
  // 2048, diffusers' `reference_image_short_edge`).
  int64_t reference_short_edge = 2048;
};

struct ModelInfo {
  std::string dir;
  std::string transformer_dir, vae_dir;
  std::string text_encoder_dir;  // empty when the folder has none
  std::string audio_vae_dir;     // empty when the folder has no audio_vae/ (no soundtrack)
  bool prompt_encoder = false;   // text_encoder/ (Qwen3-VL) and tokenizer/: a prompt conditions it
  dit::DitConfig dit;
  vae::VaeConfig vae;
  double video_shift = 12.0, audio_shift = 3.0;  // scheduler/ and audio_scheduler/ "shift"
  // The audio VAE's waveform (audio_vae/ config): samples per second and per latent. 0 when the
  // folder has no audio VAE, or its config cannot be read (the decoder's load says why).
  int64_t audio_rate = 0, audio_hop = 0;
  // Latents the audio decoder reads on either side of a range (AudioVaeConfig::context_latents):
  // what a streamed soundtrack keeps behind and ahead of its last piece. 0 as above.
  int64_t audio_context_latents = 0;
  // Its encoder (Ref2VA's sound): the first convolution's width and the parameters a checkpoint
  // holds for it; 0 as above.
  int64_t audio_encoder_dim = 0, audio_encoder_params = 0;
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
  // transformer_dir holds Ref2VA's DiT (read_model's `ref2va`, or a native partition listing
  // "ref2va"): it serves requests with references, and only those (the release's two DiTs share
  // their shapes but were trained for different tasks).
  bool ref2va = false;
};

// Reads and cross-checks the configs. `ref2va`: read Ref2VA's DiT, the diffusers layout's
// transformer_ref/ (a native Ref2VA/ partition's transformer/ is read either way). Throws
// h3::Error: kNotFound (no folder, no model_index.json, no transformer/ or vae/ config, no Ref2VA
// DiT), kFormat (unreadable JSON), kMismatch (transformer and VAE disagree), each naming the file
// and what to fix.
ModelInfo read_model(const std::string& dir, bool ref2va = false);

// Why `m` cannot condition on keyframes (FL2VA), or empty when it can: its partition lists no
// "fl2va" task, its VAE checkpoint holds no encoder, or (unless the prompt comes as precomputed
// embeddings, `embeddings`) its text encoder has no vision tower. Reads safetensors headers only.
std::string fl2va_missing(const ModelInfo& m, bool embeddings);
// Why `m` cannot condition on references (Ref2VA), or empty when it can: its DiT is not Ref2VA's,
// its VAE checkpoint holds no encoder, or (without `embeddings`) it has no vision tower.
std::string ref2va_missing(const ModelInfo& m, bool embeddings);
// Why `m`'s DiT does not serve `req`'s task (T2VA, FL2VA or Ref2VA), or empty: Ref2VA's DiT serves
// only requests with references, FL2VA's only those without; a partition serves the tasks its
// index lists. Then, for FL2VA and Ref2VA, what fl2va_missing / ref2va_missing say.
std::string task_missing(const ModelInfo& m, const TaskAsk& ask);
inline std::string task_missing(const ModelInfo& m, const GenerationRequest& req) {
  return task_missing(m, task_ask(req));
}
// Throws h3::Error(kInvalidArgument) "<what the request asks for>, which this model cannot do:
// <task_missing>" when task_missing is not empty.
void check_task(const ModelInfo& m, const TaskAsk& ask);

// Throws h3::Error(kNotFound) naming <dir>/audio_vae when the model cannot make a soundtrack.
void require_audio_vae(const ModelInfo& m);

}  // namespace h3
