// The H3 video-VAE decoder configuration (docs/h3-model.md §7.1, §7.2, §7.4, §7.5).
//
// One struct serves the full-size release decoder and the tiny test decoders:
// it is read either from the release's diffusers `vae/config.json` schema or
// from the native layout (the `video_vae/config.json` wrapper plus its
// `source/config.json`). What decoding needs, and the CNN encoder's structure (§7.6;
// read by VideoEncoder only, checked by validate_encoder).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace h3::vae {

struct VaeConfig {
  // ViT decoder (§7.2).
  int64_t latent_channels = 24;
  int64_t out_channels = 3;
  int64_t patch_size = 16;   // spatial pixels per latent (vae_ratio)
  int64_t patch_size_t = 4;  // frames per latent (vae_ratio_t)
  int64_t num_layers = 36;
  int64_t num_heads = 32;
  int64_t head_dim = 64;
  int64_t num_register_tokens = 4;
  int64_t ffn_mult = 4;
  double rope_theta = 100.0;
  double rope_dim_ratio = 0.75;
  double norm_eps = 1e-5;

  // Temporal chunking (§7.3). The isolated head/tail paths are off in the release.
  int64_t clip_length = 17;
  int64_t token_drop = 3;
  bool isolated_first_frame = false;
  bool isolated_last_frame = false;

  // Spatial tiling (§7.4): on in the release; tile and overlap in pixels.
  bool tiling = true;
  int64_t tile_size = 256;
  int64_t tile_overlap_min = 64;

  // Per-channel latent statistics (§7.5): decoder input = z * std + mean.
  std::vector<double> latents_mean;
  std::vector<double> latents_std;

  // CNN encoder (§7.6), per level: the release's values unless the config says otherwise.
  int64_t in_channels = 3;
  std::vector<int64_t> encoder_channels = {128, 256, 256, 512, 512, 1024};  // block_out_channels
  std::vector<int64_t> encoder_spatial_down = {2, 2, 2, 2, 1, 1};
  std::vector<int64_t> encoder_temporal_down = {1, 2, 2, 1, 1, 1};
  int64_t encoder_layers_per_block = 2;
  int64_t encoder_norm_groups = 32;
  double encoder_norm_eps = 1e-6;
  std::string encoder_padding_mode = "reflect";  // spatial; the temporal padding is causal zeros
  bool encoder_tiling = true;           // 256-px tiles like the decoder's (same tile_size / tile_overlap_min)
  bool encoder_t_isolated_norm = true;  // GroupNorm per frame (native use_t_isolated_gn)
  bool encoder_causal = true;           // native causal_encoder with zero temporal padding

  int64_t dim() const { return num_heads * head_dim; }
  int64_t ffn_inner() const { return dim() * ffn_mult; }
  // Rotated dims per head: int(head_dim * ratio) (48 of 64 in the release).
  int64_t rope_dim() const { return static_cast<int64_t>(static_cast<double>(head_dim) * rope_dim_ratio); }
  int64_t patch_values() const { return out_channels * patch_size_t * patch_size * patch_size; }

  // Throws h3::Error(kFormat) naming `origin` when a value cannot be decoded with.
  void validate(const std::string& origin) const;
  // Throws h3::Error(kFormat) naming `origin` when the encoder settings cannot be encoded with.
  void validate_encoder(const std::string& origin) const;
};

// Where a decoder's config and weights live on disk.
struct VaeSource {
  VaeConfig config;
  std::string weights_path;  // a .safetensors file, an index JSON, or a folder holding one
  bool native = false;       // native layout (weights converted to diffusers names at load)
};

// Parses the diffusers-layout config (release vae/config.json schema). `origin` names the file.
VaeConfig parse_diffusers_config(const std::string& json_text, const std::string& origin);

// Parses the native layout: the wrapper (FL2VA/video_vae/config.json) and its source config.
VaeConfig parse_native_config(const std::string& wrapper_json, const std::string& wrapper_origin,
                              const std::string& source_json, const std::string& source_origin);

// Reads a VAE folder: either a diffusers `vae/` folder (config.json + weights) or a native
// `video_vae/` folder (wrapper config.json + source/config.json + source weights).
VaeSource find_vae(const std::string& dir);

}  // namespace h3::vae
