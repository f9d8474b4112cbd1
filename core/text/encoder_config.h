// The Qwen3-VL language model's configuration as the release's text_encoder/config.json gives it
// (its "text_config"; a bare Qwen3-VL text config is read the same way). Only the text path is
// described: H3 conditions on text-only prompts.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace h3::text {

struct EncoderConfig {
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;     // query heads
  int64_t num_kv_heads = 0;  // key-value heads (GQA)
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;  // SwiGLU width
  int64_t vocab_size = 0;         // rows of embed_tokens
  double rms_norm_eps = 1e-6;
  double rope_theta = 5e6;
  std::array<int64_t, 3> mrope_section{0, 0, 0};  // frequencies of the t, h, w axes; sum = head_dim / 2
  bool mrope_interleaved = true;
  std::string dtype = "bfloat16";  // the stored dtype the config declares

  int64_t q_width() const { return num_heads * head_dim; }
  int64_t kv_width() const { return num_kv_heads * head_dim; }

  // Throws h3::Error(kFormat) naming `origin` when the numbers cannot describe the model.
  void validate(const std::string& origin) const;
  // Throws h3::Error(kInvalidArgument) when `tp` ranks cannot split the heads, the key-value heads
  // or the SwiGLU width evenly.
  void check_tp(int tp, const std::string& origin) const;

  static EncoderConfig parse(const std::string& json_text, const std::string& origin);
  // Reads text_encoder/config.json (a folder or the file itself).
  static EncoderConfig load(const std::string& path);
  // text_encoder/config.json in the release's schema (text_config + a minimal vision_config).
  std::string to_json() const;
};

// The conditioning layer K (H3 conditions on hidden_states[K], the output of layers 0..K-1):
// the release's value, which diffusers calls `text_encoder_layer`.
constexpr int64_t kReleaseConditioningLayer = 50;

// K as a model folder's pipeline config (model_index.json, "text_encoder_layer") gives it, or the
// release's 50 when it gives none. Throws kFormat for a value that is not a positive integer.
int64_t conditioning_layer_of(const std::string& model_dir);

}  // namespace h3::text
