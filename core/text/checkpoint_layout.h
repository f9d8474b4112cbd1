// What a release text_encoder/ folder holds as a whole: the Qwen3-VL checkpoint's tensors (the
// language model with its final norm and lm_head, and the vision tower) derived from its
// config.json. The engine reads only embed_tokens and layers 0..K-1 (encoder_parameters); this
// list exists so that `h3 inspect` can say how much of the download conditioning leaves unread,
// and so that a test can hold the derivation against the release index's totals.
#pragma once

#include <string>
#include <vector>

#include "text/encoder_parameters.h"

namespace h3::text {

// Every tensor of the checkpoint `config_path` (text_encoder/config.json, with its text_config and
// vision_config) describes, with its shape. Throws h3::Error(kFormat) naming the file when the
// vision_config lacks a number the tower needs.
std::vector<EncoderParameter> checkpoint_parameters(const std::string& config_path);

}  // namespace h3::text
