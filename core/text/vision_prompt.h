// H3's FL2VA presentation of a prompt with its keyframes (docs/h3-model.md §3): for image i (from
// 1) "<Picture i>: " and its vision block <|vision_start|>, one <|image_pad|> per merged visual token,
// <|vision_end|>, then the prompt — token ids, Qwen3-VL's multimodal RoPE positions, the image rows, and the
// DiT's per-row modality tags (the vision block 0, text 1).
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "text/conditioning.h"
#include "text/text_encoder.h"
#include "text/tokenizer.h"
#include "text/vision_tower.h"

namespace h3::text {

constexpr const char* kPictureLabel = "<Picture 1>: ";

struct VisionPrompt {
  std::vector<int64_t> ids;
  at::Tensor positions;   // [3, L] int64 (t, h, w)
  at::Tensor image_mask;  // [L] bool: the <|image_pad|> rows
  at::Tensor tags;        // [L] int64: 0 for <|vision_start|> .. <|vision_end|>, 1 for text
};

// The presentation from token ids: for each image its label ids and vision block (of its grid),
// then `prompt`.
VisionPrompt present_images_ids(const std::vector<std::vector<int64_t>>& labels,
                                const std::vector<int64_t>& prompt, const VisionConfig& c,
                                const std::vector<std::array<int64_t, 3>>& grids);
// "<Picture i>: " for the image at `index` (from 0).
std::string picture_label(size_t index);
// The same from text, tokenized verbatim with the H3 tokenizer.
VisionPrompt present_images(const Tokenizer& tokenizer, const std::string& prompt, const VisionConfig& c,
                            const std::vector<std::array<int64_t, 3>>& grids);

// One image: the presentation from token ids: `label` ("<Picture 1>: " tokenized), the vision block for an
// image of grid_thw (patches), then `prompt`.
VisionPrompt present_image_ids(const std::vector<int64_t>& label, const std::vector<int64_t>& prompt,
                               const VisionConfig& c, const std::array<int64_t, 3>& grid_thw);
// The same from text, tokenized verbatim with the H3 tokenizer.
VisionPrompt present_image(const Tokenizer& tokenizer, const std::string& prompt, const VisionConfig& c,
                           const std::array<int64_t, 3>& grid_thw);

// Qwen3-VL's get_rope_index for one sequence: text tokens take consecutive positions on all three
// axes; each run of image_token_id tokens takes the next grid of `grids` (merged: t, h / merge,
// w / merge) at (start + frame, start + row, start + column), and the text after it continues at
// start + max(h, w) / merge. Throws kInvalidArgument when the runs and the grids disagree.
at::Tensor multimodal_positions(const std::vector<int64_t>& ids, int64_t image_token_id,
                                const std::vector<std::array<int64_t, 3>>& grids, int64_t merge);
// The same where runs of either pad (images' and videos') take the next grid, in order.
at::Tensor multimodal_positions(const std::vector<int64_t>& ids, int64_t image_token_id,
                                int64_t video_token_id, const std::vector<std::array<int64_t, 3>>& grids,
                                int64_t merge);

// A Ref2VA reference as its presentation shows it: an image's vision block, or a video's blocks
// (one per merged pair of the frames the conditioner read), each labelled with its time.
struct PresentedReference {
  bool video = false;
  std::array<int64_t, 3> grid{0, 0, 0};  // patches: image (1, h, w), video (blocks, h, w)
  std::vector<double> block_seconds;     // a video's, one per block (seconds_label)
  // It carries sound (a video's soundtrack; an audio reference): "<Audio j>: " comes first.
  bool sound = false;
  // An audio reference: its "<Audio j>: " label alone (sound never reaches the conditioner).
  bool audio_only = false;
};
// "<{t:.1f} seconds>": a video block's label, as Python formats it (halves to even on the binary
// value: a block at 0.25 s is "<0.2 seconds>").
std::string seconds_label(double t);
// "<Video k>: " for the video at `index` (from 0).
std::string video_label(size_t index);
// Ref2VA's presentation: per reference in order, "<Audio j>: " if it carries sound, then
// "<Picture i>: " and its <|image_pad|> block, or "<Video k>: " and per block "<{t:.1f} seconds>"
// and a <|video_pad|> block (each block placed by Qwen3-VL's positions as an image of one frame),
// or nothing more for an audio reference; then the prompt. image_mask marks both pads.
// (A reference's soundtrack label "<Audio j>: " is not built: no audio references.)
VisionPrompt present_references(const Tokenizer& tokenizer, const std::string& prompt, const VisionConfig& c,
                                const std::vector<PresentedReference>& references);

// hidden_states[K] of the presented prompt with the images' features in place (in order), as fp32
// CPU rows with their tags: the DiT's conditioning for FL2VA.
Conditioning encode_with_images(const TextEncoder& encoder, const VisionPrompt& prompt,
                                const std::vector<VisionFeatures>& images);
// One image.
Conditioning encode_with_image(const TextEncoder& encoder, const VisionPrompt& prompt,
                               const VisionFeatures& image);

}  // namespace h3::text
