// How the chunk-causal sampler (RAVEN-Streaming; docs/causal.md) cuts a clip into chunks and
// where each chunk's rows sit: video chunks of 5 latents (17 pixel frames, one VAE clip) and a
// 2-latent tail; each audio latent goes to the chunk whose video starts at or before it on the
// shared clock (3/85 chunks per audio latent), so audio never runs ahead of its video; the
// rows' positions are the dense layout's, absolute (text length L as the media origin), never
// re-based however far the stream has gone.
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
// 85 / 3 + 5/3 * (1, 4, 4, 4, 4)[: f mod 5] summed, the area-normalised (h, w) grid).
at::Tensor chunk_positions(int64_t text_rows, const ChunkSpan& span, int64_t grid_h, int64_t grid_w);

// The sampler's audio latents [1, channels, 2, A] <-> the DiT's audio rows [2A, channels]
// (the left channel's A rows, then the right's).
at::Tensor audio_rows_of(const at::Tensor& latent);
at::Tensor audio_latent_of(const at::Tensor& rows);

}  // namespace h3::dit
