// The chunk-causal forward of the H3 DiT (RAVEN-Streaming's causal lane; docs/causal.md): the
// text is prefilled once into the KV cache, then each chunk's rows — its audio rows first, then
// its video rows, at their positions (absolute, or moved back: relative positions) — run alone, attending
// [the cache's retained records | themselves] with no mask inside. A noise forward only reads the cache; a
// commit forward (the chunk's clean rows) adds its rotated keys and values as the cache's next record.
// Collective over the transformer's group like Transformer::forward: the cache holds this
// rank's heads, every rank gets the full velocities.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "dit/chunk_layout.h"
#include "dit/kv_cache.h"
#include "dit/transformer.h"

namespace h3::dit {

// The timestep RAVEN runs the text prefill and every commit forward at: t = 0.999 in fp32.
constexpr float kCleanTimestep = 0.999f;

// Text prefill: encoder states [L, text_dim] (tags [L] or undefined: all text) through the
// text projection and the refiner, then every block at t = 0.999 with the text's AdaLN rows,
// positions (i, 0, 0), attending only the text; commits the keys and values as the cache's
// first record, or, when the cache holds records already (a prompt change), puts them in the
// place of the first record. No output. Throws h3::Error(kInvalidArgument) for text of the
// wrong width.
void prefill_text(const Transformer& model, const at::Tensor& text, const at::Tensor& text_tags,
                  KvCache& cache);

struct ChunkInputs {
  ChunkSpan span;
  int64_t text_rows = 0;               // L: the media clock's origin
  at::Tensor video;                    // [1, in_channels, t_c, h, w] the chunk's video latents
  at::Tensor audio;                    // [2 a_c, audio_in_channels] its audio rows (left, then right)
  float t_video = 0.f, t_audio = 0.f;  // t = 1 - sigma of each stream
  // Relative positions: the chunks (a multiple of 3) the rows are moved back on the media clock:
  // they sit at chunk span.index - position_shift's positions (shifted_span). 0: absolute.
  int64_t position_shift = 0;
};

enum class ChunkPass {
  kNoise,   // reads the cache, returns the velocities
  kCommit,  // reads the cache, appends the chunk's keys and values to it; no velocities
};

// One chunk forward. kNoise returns the fp32 velocities of the chunk's rows: video [1, C, t_c,
// h, w], audio rows [2 a_c, 32]; kCommit returns empty tensors.
Velocity forward_chunk(const Transformer& model, const ChunkInputs& in, KvCache& cache, ChunkPass pass);

// Relative positions: moves the positions of the cache's records past the sink `chunks` chunks
// (a multiple of 3) back on the media clock, 85 * chunks / 3 on the t axis. RoPE composes,
// R(p - d) = R(-d) R(p): each layer's keys of those records are turned by R(-d) in fp32 and
// cast back to the cache's dtype; the values, the prompt's and the sink's records stay. Local
// to the rank (every rank turns its own heads).
void move_window_back(const Transformer& model, KvCache& cache, int64_t chunks);

// Several streams' chunk forwards as one batch: the chunks' rows back to back through every
// projection, norm and FFN at once, each stream's rows attending only its own cache (caches[i]
// for in[i]) and themselves. What batching streams would run (`h3 bench streams --batching`
// measures it against one forward_chunk after another; the engine does not batch, see
// docs/engine.md "Many streams"). The same velocities and cache records as forward_chunk per
// stream up to rounding: the GEMMs see more rows, which may change their blocking. sp 1 only.
std::vector<Velocity> forward_chunks(const Transformer& model, const std::vector<ChunkInputs>& in,
                                     const std::vector<KvCache*>& caches, ChunkPass pass);

}  // namespace h3::dit
