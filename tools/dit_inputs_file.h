// Reads DiT inputs from a safetensors file (the format of `h3 dit-forward --inputs`): video
// [1, 24, T, h, w], audio [2A, 32], text [L, text_dim], optional tags [L], and the 0-d timesteps
// t_video and t_audio.
#pragma once

#include <string>

#include "dit/packed_sequence.h"

namespace h3::tools {

dit::DitInputs read_dit_inputs(const std::string& path);

}  // namespace h3::tools
