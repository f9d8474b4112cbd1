// Whether tensor parallelism can split the H3 DiT (docs/h3-model.md §10.4). Which tensor
// splits how is declared with the tensor (dit/parameters.h).
#pragma once

#include <cstdint>
#include <string>

#include "io/types.h"

namespace h3::io {

// Throws kInvalidArgument naming the quantity when tp < 1 or tp does not divide
// the heads, the FFN width or the AdaLN width (the adaln_proj output rows).
void check_dit_tp(int tp, int64_t num_heads, int64_t ffn_dim, int64_t adaln_width);

}  // namespace h3::io
