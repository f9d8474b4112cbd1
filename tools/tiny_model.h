// The random tiny model: a tiny H3-architecture model with seeded random weights, in the release
// layout, that runs the very same engine path end to end (`h3 make-tiny`; the build generates it into
// build/data/tiny for the tests). The embedded default is its trained sibling, data/default
// (train/tiny), which keeps this model's text encoder and tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "audio/config.h"
#include "dit/config.h"
#include "engine/model/model.h"
#include "text/encoder_config.h"
#include "text/vision_config.h"
#include "vae/config.h"

namespace h3 {

constexpr uint64_t kTinyDefaultSeed = 20260801;

struct TinySpec {
  dit::DitConfig dit;
  vae::VaeConfig vae;
  audio::AudioVaeConfig audio;     // written to audio_vae/ in the release's native layout
  text::EncoderConfig encoder;     // its hidden size is written as the DiT's text_dim
  int64_t text_encoder_layer = 2;  // K: the conditioning is hidden_states[K] (model_index.json)
  ModelDefaults defaults;
  // The condition paths (make-tiny --conditioning): Ref2VA's DiT in transformer_ref/ (other
  // random weights) and FL2VA's and Ref2VA's encoders: the encoder tensors in vae/'s checkpoint
  // (the `vae` config's encoder_* sizes) and `vision` in text_encoder/. Off: a T2VA-only model.
  bool conditioning = false;
  text::VisionConfig vision;
};

// The tiny sizes: DiT hidden 64, 2 blocks + 2 refiner blocks, 2 heads x 128, FFN 128, text 32;
// VAE decoder 2 layers, 2 heads x 32; a Qwen3-VL-shaped text encoder of 3 layers (width 32, 4 query
// / 2 key-value heads of 16, SwiGLU 64, the release's vocabulary and RoPE) conditioning on
// hidden_states[2]; an audio VAE of the release's rates with dec_in_proj 32 -> 32, decoder_dim 128
// (stages 64 ... 1 channels) and one AMP kernel (3, dilations 1/3/5) per stage; request defaults
// 256x160, 48 frames, 8 grid points.
TinySpec tiny_spec();

// The tiny spec with the condition paths: transformer_ref/, image references encoded at a short
// edge of 96, a VAE encoder of channels 8, 16, 16, 16, 24, 24
// (GroupNorm of 4 groups) and a vision tower of depth 2, width 32, 4 heads, MLP 64, a 12 x 12
// position table, deepstack after blocks 0 and 1, out width the text encoder's.
TinySpec tiny_conditioning_spec();

// The parts of the model folder, each written on its own (the build generates them as
// separate targets): "model_index", "transformer", "vae", "audio_vae", "text_encoder",
// "tokenizer", "scheduler", "audio_scheduler".
const std::vector<std::string>& tiny_components();

// Where the tokenizer files the project ships (data/default/tokenizer: the release's) are found: the source
// tree's copy when it is there, else the installed default model's tokenizer/.
std::string default_tokenizer_source();

// The benchmarks' medium sizes: the tiny spec with a DiT of hidden 384, 6 blocks + 2 refiner
// blocks, 4 heads x 128, FFN 1024, text 256, and a VAE decoder of 4 layers, 4 heads x 64.
TinySpec medium_spec();

// Writes the model into `dir` (created): everything, or only `component`. The same seed gives
// the same bytes. tokenizer/ is a copy of `tokenizer_source` (default_tokenizer_source() when
// empty). Throws h3::Error(kInvalidArgument) for an unknown component, kNotFound for a tokenizer
// source without the three files.
void write_tiny_model(const std::string& dir, uint64_t seed, const std::string& component = "",
                      const std::string& tokenizer_source = "");
// The same for other sizes (the benchmark's medium model).
void write_random_model(const std::string& dir, const TinySpec& spec, uint64_t seed,
                        const std::string& component = "", const std::string& tokenizer_source = "");

// The release's diffusers vae/config.json schema for a decoder config (the encoder keys take the
// release's values; the tiny checkpoints hold no encoder).
std::string vae_config_json(const vae::VaeConfig& c);

}  // namespace h3
