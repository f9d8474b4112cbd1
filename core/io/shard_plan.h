// The tensor-parallel plan of the H3 DiT on canonical (diffusers) names
// (docs/h3-model.md §10.4): attention q/k/v and the AdaLN projection (weight and
// bias) split by output rows; the gated FFN input split per half; attention
// output and FFN output split by input columns with their 1-D biases
// replicated; everything else replicated.
#pragma once

#include <cstdint>
#include <string>

#include "io/types.h"

namespace h3::io {

Split dit_split(const std::string& canonical_name);

// Throws kInvalidArgument naming the quantity when tp < 1 or tp does not divide
// the heads, the FFN width or the AdaLN width (the adaln_proj output rows).
void check_dit_tp(int tp, int64_t num_heads, int64_t ffn_dim, int64_t adaln_width);

}  // namespace h3::io
