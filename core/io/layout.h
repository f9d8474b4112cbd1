// Native (original MiniMax) -> canonical (diffusers) tensor names and row
// rearrangements, for the DiT (docs/h3-model.md §4.2/§4.3) and the video VAE (§7.2,
// §10.2). Pure name logic: the row arithmetic is applied by Weights.
#pragma once

#include <string>
#include <vector>

#include "io/types.h"

namespace h3::io {

enum class Rearrange {
  kIdentity,  // rows as stored
  kQkvPart,  // fused per-head interleaved rows [q_h0; k_h0; v_h0; q_h1; ...]: take part 0 (q), 1 (k) or 2 (v)
  kSwapHalves,  // rows [a; b] -> [b; a] (native gated FFN [gate; up] -> diffusers [up; gate])
};

struct CanonicalPiece {
  std::string name;  // canonical (diffusers) name
  Rearrange how = Rearrange::kIdentity;
  int part = 0;  // q/k/v index for kQkvPart
};

// True when the names are in the native layout of `kind` (diffusers otherwise).
bool is_native_layout(ModelKind kind, const std::vector<std::string>& names);

// The canonical tensors made from one native tensor: empty when the engine does
// not use it (the DiT's derived rope.inv_freq, the VAE's mask_token), three for
// a fused qkv. Throws kFormat for a DiT or VAE-decoder name it does not know;
// VAE encoder names that match no known rename pass through unchanged.
std::vector<CanonicalPiece> native_to_canonical(ModelKind kind, const std::string& native_name);

}  // namespace h3::io
