// What a causal request holds after each chunk it synthesised (docs/causal.md "Live"): the KV
// cache and the latents kept for the decode and the soundtrack. An endless stream's must not grow
// with its length: the cache holds at most sink + window records, and the latents leave once the
// decode and the audio decoder are past them. Rank 0's figures, handed to the caller's observer
// (GenerateExtras::on_causal_chunk; an application's GenerateCall::on_causal_chunk). Torch-free.
#pragma once

#include <cstdint>

namespace h3 {

struct CausalHeld {
  int64_t chunk = 0;          // the chunk just synthesised (0-based)
  int64_t kv_records = 0;     // records the KV cache retains, the prompt's included
  int64_t kv_rows = 0;        // their rows
  int64_t kv_bytes = 0;       // their keys and values, every layer, this rank's heads
  int64_t video_latents = 0;  // latent frames kept for the decode
  int64_t audio_latents = 0;  // audio latents (per channel) kept for the soundtrack's decoder
  int64_t latent_bytes = 0;   // the bytes of both
  // Relative positions (docs/causal.md "Positions"): the chunks this chunk and the cache's window
  // sat moved back by (0: at their own positions).
  int64_t position_shift = 0;
  // prompt-switch=recache: the bytes of the kept chunks' commit inputs held for a recache.
  int64_t recache_bytes = 0;
  // The CPU block cache's (the process's, every stream's): the free blocks it keeps for the next
  // chunk's forwards and the sizes it tracks, both bounded by what the last chunks asked for
  // (docs/causal.md "Memory stays flat").
  int64_t cached_block_bytes = 0;
  int64_t cached_block_sizes = 0;
};

}  // namespace h3
