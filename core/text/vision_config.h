// The Qwen3-VL vision tower's configuration as text_encoder/config.json gives it ("vision_config",
// with the special token ids of the top level), and the image processor's settings: Qwen3-VL's
// published preprocessor values (no preprocessor_config.json of the release is among the
// reference files, so they are not checked against H3's own).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace h3::text {

struct VisionConfig {
  int64_t depth = 0;        // blocks
  int64_t hidden_size = 0;  // the tower's width
  int64_t num_heads = 0;
  int64_t intermediate_size = 0;  // the blocks' GELU MLP width
  int64_t in_channels = 3;
  int64_t patch_size = 0;                         // spatial patch side (pixels)
  int64_t temporal_patch_size = 0;                // frames per patch (an image is repeated to fill it)
  int64_t spatial_merge_size = 0;                 // the merger joins merge x merge patches into one token
  int64_t out_hidden_size = 0;                    // the language model's width
  int64_t num_position_embeddings = 0;            // a square learned table: side = sqrt(this)
  std::vector<int64_t> deepstack_visual_indexes;  // blocks whose output feeds a deepstack merger
  std::string hidden_act = "gelu_pytorch_tanh";   // the blocks' MLP (the mergers use exact GELU)
  double rope_theta = 10000.0;                    // the 2-D rotary embedding's base

  // Special tokens of the presentation (top level of config.json).
  int64_t image_token_id = 151655;
  int64_t video_token_id = 151656;
  int64_t vision_start_token_id = 151652;
  int64_t vision_end_token_id = 151653;

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t merged_width() const { return hidden_size * spatial_merge_size * spatial_merge_size; }
  int64_t patch_width() const { return in_channels * temporal_patch_size * patch_size * patch_size; }
  int64_t position_side() const;  // sqrt(num_position_embeddings)

  // Throws h3::Error(kFormat) naming `origin` when the numbers cannot describe the tower.
  void validate(const std::string& origin) const;
  // Throws h3::Error(kInvalidArgument) when `tp` ranks cannot split the heads or the MLP width.
  void check_tp(int tp, const std::string& origin) const;

  // A Qwen3-VL config.json's text (its "vision_config"); kFormat when there is none.
  static VisionConfig parse(const std::string& json_text, const std::string& origin);
  // Reads text_encoder/config.json (a folder or the file itself).
  static VisionConfig load(const std::string& path);
};

// The image processor (transformers' Qwen2VLImageProcessor with Qwen3-VL's settings): resize
// (bicubic, antialiased) so both sides are multiples of patch * merge and the pixel count lies in
// [min_pixels, max_pixels], normalise (x / 255 - mean) / std, flatten into patches.
struct ImageProcessorConfig {
  int64_t min_pixels = 65536;     // Qwen3-VL: size.shortest_edge = 256 * 256
  int64_t max_pixels = 16777216;  // Qwen3-VL: size.longest_edge = 4096 * 4096
  // The video processor's (Qwen3VLVideoProcessor): bounds on the pixels of all of a video's
  // frames together, Qwen3-VL's published video_preprocessor_config.json (size.shortest_edge
  // 4096, size.longest_edge 25165824; no per-frame cap, as transformers 5 does by default).
  int64_t video_min_pixels = 4096;
  int64_t video_max_pixels = 25165824;
  std::array<double, 3> mean{0.5, 0.5, 0.5};
  std::array<double, 3> std{0.5, 0.5, 0.5};
  // What the engine accepts before resizing (not the reference's: it has no limit but an aspect
  // ratio under 200): each side at least `min_side` pixels (one patch), at most `max_input_pixels` pixels.
  int64_t min_side = 16;
  int64_t max_input_pixels = int64_t(8192) * 8192;
};

// transformers' smart_resize: the (height, width) an image of height x width is resized to, both
// multiples of `factor`, the pixel count within [min_pixels, max_pixels] (rounding as Python's
// round(), halves to even). Throws h3::Error(kInvalidArgument) for an aspect ratio over 200.
std::array<int64_t, 2> smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                    int64_t max_pixels);
// Qwen3-VL's video smart_resize: the (height, width) each of `frames` frames is resized to, the
// bounds applying to the pixels of all frames (the frame count rounded to the temporal patch).
std::array<int64_t, 2> smart_resize_video(int64_t frames, int64_t height, int64_t width, int64_t factor,
                                          int64_t temporal_factor, int64_t min_pixels, int64_t max_pixels);

}  // namespace h3::text
