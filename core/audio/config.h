// The H3 audio VAE's decoder configuration (docs/h3-model.md §9; docs/audio.md).
//
// Read from the diffusers `audio_vae/config.json` (AutoencoderKLMiniMaxH3Audio
// keys) or from the release's native wrapper (config.json naming config.yaml and
// metadata.json). Defaults are the release's values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace h3::audio {

struct AudioVaeConfig {
  int64_t latent_channels = 32;  // the DiT's audio row width
  int64_t latent_dim = 2048;     // dec_in_proj: latent_channels -> latent_dim (1x1)
  int64_t decoder_dim = 1024;    // conv_pre: latent_dim -> decoder_dim; stage i has decoder_dim / 2^(i+1)
  std::vector<int64_t> decoder_rates{5, 5, 2, 2, 2, 2, 2};         // upsampling strides (hop 800)
  std::vector<int64_t> decoder_kernel_sizes{9, 9, 4, 4, 4, 4, 4};  // transposed-conv kernels
  std::vector<int64_t> resblock_kernel_sizes{3, 7, 11};            // one AMP block per kernel
  std::vector<std::vector<int64_t>> resblock_dilation_sizes{{1, 3, 5}, {1, 3, 5}, {1, 3, 5}};
  int64_t sample_rate = 32000;
  // The encoder (DAC's strided convolutions, then pre_block's causal attention): its first
  // convolution's width, doubled by each strided stage, the strides (their product is the hop),
  // and pre_block's heads (latent_dim / heads wide, mean-pooled over the heads).
  int64_t encoder_dim = 64;
  std::vector<int64_t> encoder_rates{2, 4, 4, 5, 5};
  int64_t num_attention_heads = 8;
  // Fixed by BigVGAN's code, not configurable in the release; kept here so that the reach
  // arithmetic (context_latents) reads every kernel from one place.
  int64_t conv_pre_kernel = 7;
  int64_t conv_post_kernel = 7;
  int64_t anti_alias_taps = 12;  // the Kaiser-windowed sinc filters of the 2x up/down sampling

  // Per-channel latent statistics: decoder input = z * std + mean.
  std::vector<double> latents_mean;
  std::vector<double> latents_std;

  int64_t num_stages() const { return static_cast<int64_t>(decoder_rates.size()); }
  int64_t stage_channels(int64_t stage) const { return decoder_dim >> (stage + 1); }
  int64_t hop() const;  // waveform samples per latent: the product of the rates (800)
  // The encoder's trunk width after its strided stages: encoder_dim * 2^stages (2048).
  int64_t encoder_trunk() const { return encoder_dim << encoder_rates.size(); }

  // How far one latent's influence reaches beyond its own hop() samples, on either side, in
  // waveform samples (22,893 in the release): every zero/replicate-padded convolution and
  // anti-aliasing filter counted at its own sample rate.
  int64_t reach_samples() const;
  // Latents of context each side of a boundary that make a piecewise decode exact:
  // ceil(reach_samples / hop) (29 in the release).
  int64_t context_latents() const;

  // Throws h3::Error(kFormat) naming `origin` when a value cannot be decoded with.
  void validate(const std::string& origin) const;
};

// The diffusers layout's config.json (release audio_vae/config.json schema). `origin` names the file.
AudioVaeConfig parse_diffusers_config(const std::string& json_text, const std::string& origin);

// The native layout: the wrapper config.json (latent statistics, file names), metadata.json
// (decoder kwargs) and config.yaml (model_config scalars, checked against metadata.json).
AudioVaeConfig parse_native_config(const std::string& wrapper_json, const std::string& wrapper_origin,
                                   const std::string& metadata_json, const std::string& metadata_origin,
                                   const std::string& yaml_text, const std::string& yaml_origin);

// Where an audio VAE's config and weights live on disk.
struct AudioVaeSource {
  AudioVaeConfig config;
  std::string weights_path;  // a .safetensors file, an index JSON, or a folder holding one
  bool native = false;       // the release's native wrapper layout (same tensor names)
};

// Reads an audio VAE folder: the diffusers layout (config.json with the decoder keys +
// diffusion_pytorch_model.safetensors) or the native one (wrapper config.json naming
// config.yaml, metadata.json and model.safetensors). Throws h3::Error naming the file.
AudioVaeSource find_audio_vae(const std::string& dir);

// A small config of the release's architecture (rates, kernels, dilations as released) with
// the given widths and seeded latent statistics: tiny models and tests.
AudioVaeConfig small_config(int64_t latent_dim, int64_t decoder_dim, uint64_t stats_seed);

}  // namespace h3::audio
