// How the chunk-causal sampler (RAVEN-Streaming; docs/causal.md) cuts a clip into chunks and
// where each chunk's rows sit: video chunks of 5 latents (17 pixel frames, one VAE clip) and a
// 2-latent tail; each audio latent goes to the chunk whose video starts at or before it on the
// shared clock (3/85 chunks per audio latent), so audio never runs ahead of its video; the
// rows' positions are the dense layout's (text length L as the media origin), absolute, or with
// relative positions moved back in steps of 3 chunks once a stream passes the trained length.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "h3/model_clock.h"

namespace h3::dit {

struct ChunkSpan {
  int64_t index = 0;
  int64_t video_begin = 0, video_end = 0;  // video latents [begin, end)
  int64_t audio_begin = 0, audio_end = 0;  // audio latents per channel [begin, end)
  int64_t video_latents() const { return video_end - video_begin; }
  int64_t audio_latents() const { return audio_end - audio_begin; }
  // Rows of the chunk's forward: 2 per audio latent (left, right), grid_h * grid_w per video latent.
  int64_t rows(int64_t grid_h, int64_t grid_w) const {
    return 2 * audio_latents() + video_latents() * grid_h * grid_w;
  }
};

// Start of full chunk c on the media clock, in audio latents: c * 85 / 3 (17 frames at 24 fps =
// 85/3 audio latents at 40 per second).
double chunk_start_time(int64_t chunk);

// Full chunk c of a clip or stream: video latents [5c, 5c + 5) and the audio latents of its
// stretch of the clock.
ChunkSpan full_chunk(int64_t chunk);

// The chunks of a clip of `video_latents` (5k + 2) and `audio_latents` (round(frames * 5 / 3))
// latents: k full chunks and the tail. Throws h3::Error(kInvalidArgument) for a latent count
// that is not 5k + 2 or audio latents that do not reach the tail's start.
std::vector<ChunkSpan> cut_chunks(int64_t video_latents, int64_t audio_latents);

// The fp64 positions [rows, 3] of a chunk's rows in its forward's order: its audio rows
// (left channel's latents, then the right's: t = L + j, h = 0, w = the grid's first / last
// value), then its video latents frame-major with row-major patches (t = L + floor(f / 5) *
// 85 / 3 + 5/3 * (1, 4, 4, 4, 4)[: f mod 5] summed, the area-normalised (h, w) grid). A chunk
// moved before the clip's start (negative latents) follows the same rule, floor and mod included.
at::Tensor chunk_positions(int64_t text_rows, const ChunkSpan& span, int64_t grid_h, int64_t grid_w);

// Relative positions (docs/causal.md "Positions"). The audio cut repeats every 3 chunks (85
// audio latents, 51 frames): chunk c - 3m has chunk c's audio count and every row of it sits
// exactly 85m earlier on the media clock, audio and video alike. So chunks move back in steps of
// kPositionStep, and a moved chunk's positions are a finite clip's chunk c - 3m's, bit for bit.
constexpr int64_t kPositionStep = 3;

// The highest chunk the current chunk sits at with relative positions: the last whole chunk of a
// clip of `trained_chunks` chunks (the tail included: trained_chunks - 2), but at least 2 (a
// 3-chunk cycle from chunk 0), so that the current chunk always sits where a clip of the trained
// length has a whole chunk. The window's chunks sit just before it, however far back that is: at
// the sink's places, or before the clip's start (negative chunks) when the trained clip is short.
// (The current chunk's place decides what the DiT draws where: docs/causal.md "Positions".)
// trained_chunks >= 2.
int64_t relative_anchor(int64_t trained_chunks);

// How many chunks chunk `chunk` (a 2-latent tail when `tail`) and the window's records are moved
// back with relative positions: 0 while it lies within a clip of `trained_chunks` chunks or at or
// before the anchor (so a clip that long or shorter is never moved), otherwise the smallest
// multiple of 3 that brings it to the anchor or before (it then sits at anchor - 2 .. anchor).
int64_t relative_shift(int64_t chunk, bool tail, int64_t trained_chunks, int64_t anchor);

// Span `s` moved `chunks` (a multiple of 3) chunks back: index, video and audio latents; its
// chunk_positions are then those of chunk s.index - chunks of a finite clip, which may be before
// the clip's start (a negative chunk: the same layout, 85/3 audio latents per chunk earlier).
// Throws h3::Error(kInternal) for a shift that is not a non-negative multiple of 3.
ChunkSpan shifted_span(const ChunkSpan& s, int64_t chunks);

// The sampler's audio latents [1, channels, 2, A] <-> the DiT's audio rows [2A, channels]
// (the left channel's A rows, then the right's).
at::Tensor audio_rows_of(const at::Tensor& latent);
at::Tensor audio_latent_of(const at::Tensor& rows);

}  // namespace h3::dit
