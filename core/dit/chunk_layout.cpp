#include "dit/chunk_layout.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "dit/frames.h"
#include "dit/packed_sequence.h"
#include "h3/error.h"

namespace h3::dit {

double chunk_start_time(int64_t chunk) {
  // 17 frames of 40 / 24 audio latents each, as one product and one division: the same double as
  // c * 85 / 3.
  return static_cast<double>(chunk) * static_cast<double>(kChunkFrames * kAudioLatentsPerSecond) /
         static_cast<double>(kFps);
}

namespace {
int64_t audio_start(int64_t chunk) {
  return static_cast<int64_t>(std::ceil(chunk_start_time(chunk)));
}
}  // namespace

ChunkSpan full_chunk(int64_t chunk) {
  ChunkSpan s;
  s.index = chunk;
  s.video_begin = chunk * kChunkLatents;
  s.video_end = s.video_begin + kChunkLatents;
  s.audio_begin = audio_start(chunk);
  s.audio_end = audio_start(chunk + 1);
  return s;
}

std::vector<ChunkSpan> cut_chunks(int64_t video_latents, int64_t audio_latents) {
  if (!is_valid_latent_frames(video_latents)) {
    throw Error(ErrorKind::kInvalidArgument,
                "chunk-causal sampling: " + std::to_string(video_latents) +
                    " video latents: the clip must have 5k + 2 (17k + 5 frames)");
  }
  const int64_t full = (video_latents - kTailLatents) / kChunkLatents;
  if (audio_latents < audio_start(full) + 1) {
    throw Error(ErrorKind::kInvalidArgument, "chunk-causal sampling: " + std::to_string(audio_latents) +
                                                 " audio latents do not reach the last chunk (it starts at " +
                                                 std::to_string(audio_start(full)) + ")");
  }
  std::vector<ChunkSpan> out;
  for (int64_t c = 0; c <= full; ++c) {
    ChunkSpan s = full_chunk(c);
    if (c == full) {
      s.video_end = video_latents;  // the tail's latents
      s.audio_end = audio_latents;
    }
    out.push_back(s);
  }
  return out;
}

at::Tensor chunk_positions(int64_t text_rows, const ChunkSpan& span, int64_t grid_h, int64_t grid_w) {
  auto pos = at::zeros({span.rows(grid_h, grid_w), 3}, at::kDouble);
  double* p = pos.data_ptr<double>();
  const auto gh = spatial_grid(grid_h, grid_h, grid_w);
  const auto gw = spatial_grid(grid_w, grid_h, grid_w);
  const double origin = static_cast<double>(text_rows);
  int64_t r = 0;
  for (int64_t ch = 0; ch < 2; ++ch) {
    const double w = ch == 0 ? gw.front() : gw.back();
    for (int64_t j = span.audio_begin; j < span.audio_end; ++j, ++r) {
      p[r * 3] = origin + static_cast<double>(j);
      p[r * 3 + 2] = w;
    }
  }
  for (int64_t f = span.video_begin; f < span.video_end; ++f) {
    // The pixel frames before latent f within its chunk: 1 for the chunk's first latent, 4 each after.
    // Floor division, so that a chunk moved before the clip's start keeps its latents' spacing.
    const int64_t chunk = f >= 0 ? f / kChunkLatents : -((-f + kChunkLatents - 1) / kChunkLatents);
    const int64_t k = f - chunk * kChunkLatents;
    const double within = k == 0 ? 0.0 : static_cast<double>(1 + (k - 1) * kFramesPerLatent);
    const double t = origin + chunk_start_time(chunk) + kAudioLatentsPerFrame * within;
    for (int64_t i = 0; i < grid_h; ++i) {
      for (int64_t j = 0; j < grid_w; ++j, ++r) {
        p[r * 3] = t;
        p[r * 3 + 1] = gh[static_cast<size_t>(i)];
        p[r * 3 + 2] = gw[static_cast<size_t>(j)];
      }
    }
  }
  return pos;
}

int64_t relative_anchor(int64_t trained_chunks) {
  return std::max(trained_chunks - 2, kPositionStep - 1);
}

int64_t relative_shift(int64_t chunk, bool tail, int64_t trained_chunks, int64_t anchor) {
  if (chunk <= anchor || (tail && chunk <= trained_chunks - 1)) return 0;
  return (chunk - anchor + kPositionStep - 1) / kPositionStep * kPositionStep;
}

ChunkSpan shifted_span(const ChunkSpan& s, int64_t chunks) {
  if (chunks % kPositionStep != 0 || chunks < 0) {
    throw Error(ErrorKind::kInternal, "relative positions: chunk " + std::to_string(s.index) +
                                          " cannot move " + std::to_string(chunks) + " chunks back");
  }
  // 85 audio latents and 15 video latents per 3 chunks: whole numbers both.
  static_assert(kPositionStep * kChunkFrames * kAudioLatentsPerSecond % kFps == 0,
                "3 chunks are a whole number of audio latents");
  const int64_t audio =
      chunks / kPositionStep * (kPositionStep * kChunkFrames * kAudioLatentsPerSecond / kFps);
  ChunkSpan out = s;
  out.index -= chunks;
  out.video_begin -= chunks * kChunkLatents;
  out.video_end -= chunks * kChunkLatents;
  out.audio_begin -= audio;
  out.audio_end -= audio;
  return out;
}

at::Tensor audio_rows_of(const at::Tensor& latent) {
  const int64_t c = latent.size(1), a = latent.size(3);
  return latent.select(0, 0).permute({1, 2, 0}).reshape({2 * a, c});
}

at::Tensor audio_latent_of(const at::Tensor& rows) {
  const int64_t a = rows.size(0) / 2, c = rows.size(1);
  return rows.reshape({2, a, c}).permute({2, 0, 1}).unsqueeze(0).contiguous();
}

}  // namespace h3::dit
