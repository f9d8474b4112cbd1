// The H3 DiT configuration, read from either schema the release ships:
// transformer/config.json (diffusers names: num_refiner_layers, ffn_dim, in_channels, ...) and
// FL2VA/transformer/config.json (native names: token_refiner_num_layers, ffn_hidden_size,
// latents_dim, adaln_out_features, ...). Small test models come from the same code.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace h3::dit {

enum class ConfigSchema { kDiffusers, kNative };

struct DitConfig {
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_refiner_layers = 0;
  int64_t num_heads = 0;
  int64_t head_dim = 0;
  int64_t ffn_dim = 0;
  int64_t in_channels = 24;        // video latent channels
  int64_t audio_in_channels = 32;  // audio latent channels
  std::array<int64_t, 3> patch{1, 2, 2};
  int64_t text_dim = 0;
  int64_t freq_dim = 256;  // sinusoidal timestep features
  int64_t time_embed_hidden_dim = 0;
  int64_t time_embed_dim = 0;
  int64_t rope_freq_dim = 16;  // frequencies per RoPE axis (3 axes, rotate-half doubles them)
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  double qk_norm_eps = 1e-5;
  double final_norm_eps = 1e-5;
  ConfigSchema schema = ConfigSchema::kDiffusers;

  int64_t inner_dim() const { return num_heads * head_dim; }
  int64_t adaln_width() const { return 18 * hidden_size; }  // 3 modalities x 6 vectors
  int64_t final_adaln_width() const { return 2 * hidden_size; }
  int64_t video_row_width() const { return in_channels * patch[0] * patch[1] * patch[2]; }
  int64_t rope_dims() const { return 6 * rope_freq_dim; }  // rotated dims of each head

  // Throws h3::Error(kFormat) naming `origin` when the numbers cannot describe an H3 DiT.
  void validate(const std::string& origin) const;

  // Parses JSON text of either schema; `origin` names the file in errors.
  static DitConfig parse(const std::string& json_text, const std::string& origin);
  // Reads a config.json file, or the config.json inside a folder.
  static DitConfig load(const std::string& path);
  // The config as JSON text in the release's diffusers schema (transformer/config.json).
  std::string to_json() const;
};

}  // namespace h3::dit
