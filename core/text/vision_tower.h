// The Qwen3-VL vision tower (docs/h3-model.md §2-3; docs/text.md, "Vision tower"): what H3's FL2VA
// presentation puts at the <|image_pad|> tokens of the prompt.
//
// preprocess(): transformers' Qwen2VLImageProcessor with Qwen3-VL's settings — smart_resize to
// multiples of patch * merge (32) within [min_pixels, max_pixels], bicubic antialiased resize of
// the uint8 image (ATen's kernel, the one torchvision calls), (x - 255 mean) / (255 std) in fp32,
// the image repeated to the temporal patch (2), patches flattened (channel, frame, row, column)
// and ordered merge block by merge block.
//
// forward(): Conv3d patch embedding (as a matrix product: kernel = stride), plus the learned
// square position table resampled bilinearly (align_corners) to the grid; depth pre-LayerNorm
// blocks (fused qkv, 2-D rotary embedding of (row, column) on each half of the head, full
// attention within each frame, tanh-GELU MLP); after the blocks of deepstack_visual_indexes a
// deepstack merger, after the last the merger: 2 x 2 patches -> one token of the language
// model's width.
//
// Tensor parallel over a group of ranks like the language model: qkv and fc1 split by output
// rows (whole heads per rank), proj and fc2 by input columns with one all_reduce each; norms,
// the patch embedding, the position table and the mergers whole.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "text/text_encoder.h"
#include "text/vision_config.h"
#include "text/vision_parameters.h"

namespace h3::dist {
class Group;
}

namespace h3::text {

struct VisionInputs {
  at::Tensor patches;  // [t * h * w, channels * temporal_patch * patch^2], fp32, merge-block order
  std::array<int64_t, 3> grid_thw{0, 0, 0};  // in patches: frames / temporal_patch, rows, columns
  at::Tensor resized;                        // the resized image, uint8 [3, rows * patch, columns * patch]
  int64_t tokens(int64_t merge) const { return grid_thw[0] * grid_thw[1] * grid_thw[2] / (merge * merge); }
};

struct VisionFeatures {
  at::Tensor embeds;                  // [tokens, out_hidden]: what replaces the <|image_pad|> embeddings
  std::vector<at::Tensor> deepstack;  // one [tokens, out_hidden] per deepstack layer, in order
};

class VisionTower {
 public:
  // Loads the tower of `dir` (a text_encoder/ folder: config.json with its vision_config and a
  // checkpoint holding model.visual.*); with a group, this rank's shards. Throws h3::Error:
  // kFormat (no vision_config), kInvalidArgument (a group size that cannot split the heads or the
  // MLP), kNotFound (a tensor missing), kMismatch (a tensor whose shape disagrees with config.json).
  static VisionTower load(const std::string& dir, dist::Group* group = nullptr,
                          const EncoderOptions& opts = {}, const ImageProcessorConfig& processor = {});

  const VisionConfig& config() const { return config_; }
  const ImageProcessorConfig& processor() const { return processor_; }

  // The image processor for one image, uint8 [height, width, 3] (RGB, any strides, on the CPU).
  // Throws kInvalidArgument naming the input: not uint8, not [H, W, 3], a side under
  // processor().min_side, more than processor().max_input_pixels pixels, aspect ratio over 200.
  VisionInputs preprocess(const at::Tensor& image) const;
  // The video processor (Qwen3VLVideoProcessor) for the frames a conditioner reads, uint8
  // [frames, height, width, 3]: smart_resize_video over all of them, the same resize and
  // normalisation per frame, the last frame repeated to whole temporal patches, each pair of
  // frames one frame of patches (grid_thw[0] = ceil(frames / 2)). Throws kInvalidArgument as
  // preprocess does.
  VisionInputs preprocess_video(const at::Tensor& frames) const;

  // The merged visual embeddings and deepstack features of one image (or video: t frames) in the
  // compute dtype on the tower's device. Every rank of the group calls it with the same input.
  // Throws kInvalidArgument when the patches do not match grid_thw or the config.
  VisionFeatures forward(const at::Tensor& patches, const std::array<int64_t, 3>& grid_thw) const;
  VisionFeatures forward(const VisionInputs& in) const { return forward(in.patches, in.grid_thw); }

  // The tower runs on `group` from now on (a world formed again: the same ranks, a new group).
  void use_group(dist::Group* group) { group_ = group; }

  // This rank's tensors with their checkpoint names.
  std::vector<std::pair<std::string, at::Tensor>> named() const;

 private:
  VisionConfig config_;
  ImageProcessorConfig processor_;
  VisionWeights weights_;
  dist::Group* group_ = nullptr;
  int tp_rank_ = 0, tp_size_ = 1;
  std::string dir_;
};

// The learned position table resampled to a grid of rows x columns patches (bilinear,
// align_corners, edges clamped), in merge-block order: for each patch the 4 table rows it reads
// ([n, 4] int64) and their weights ([n, 4] fp32).
std::pair<at::Tensor, at::Tensor> vision_position_taps(const VisionConfig& c, int64_t rows, int64_t columns);

// The (row, column) of each patch of a rows x columns grid in merge-block order: [n, 2] int64.
at::Tensor vision_patch_coordinates(int64_t rows, int64_t columns, int64_t merge);

}  // namespace h3::text
