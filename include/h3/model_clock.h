// The clock of MiniMax-H3 (docs/h3-model.md §12), written once: 24 frames a second; chunks of 17
// pixel frames (one VAE encoder clip) that are 5 video latents (the first latent 1 frame, each
// other 4); a clip of 17n+5 frames, n whole chunks and a tail of 5 frames (5n+2 latents); 40
// audio latents a second. Every count, time and length derived from them is a function here.
// Torch-free and header-only: the plugin, which links no part of the engine, counts with the
// same numbers the engine does.
#pragma once

#include <algorithm>
#include <cstdint>

namespace h3::dit {

constexpr int64_t kFps = 24;             // pixel frames per second
constexpr int64_t kChunkFrames = 17;     // pixel frames per chunk: one VAE encoder clip
constexpr int64_t kChunkLatents = 5;     // video latents per chunk
constexpr int64_t kFramesPerLatent = 4;  // pixel frames per video latent after a chunk's first
constexpr int64_t kTailFrames = 5;       // the +5 of a clip's 17n+5 frames
constexpr int64_t kTailLatents = 2;      // the +2 of its 5n+2 latents
// The latents the VAE drops from a clip's last encoded chunk (its token_drop): 5 - 3 leaves the tail's 2.
constexpr int64_t kDroppedLatents = kChunkLatents - kTailLatents;
// The shortest clip the VAE's temporal plan decodes: one whole chunk and the tail (7 latents).
// The engine generates shorter requests at this length and trims them.
constexpr int64_t kMinDecodedFrames = kChunkFrames + kTailFrames;
constexpr int64_t kAudioLatentsPerSecond = 40;
// Audio latents per pixel frame, 40 / 24: the unit of the DiT's time positions. The very double
// 5.0 / 3.0 (both divisions round the same real), which the golden positions rest on.
constexpr double kAudioLatentsPerFrame =
    static_cast<double>(kAudioLatentsPerSecond) / static_cast<double>(kFps);
static_assert(kAudioLatentsPerFrame == 5.0 / 3.0, "the positions' unit is the double 5/3");
static_assert(kChunkFrames == 1 + (kChunkLatents - 1) * kFramesPerLatent, "a chunk's latents are its frames");
static_assert(kTailFrames == 1 + (kTailLatents - 1) * kFramesPerLatent, "the tail's latents are its frames");

// 17n+5: the frames of a clip of `chunks` whole chunks and the tail.
constexpr int64_t clip_frames(int64_t chunks) {
  return kChunkFrames * chunks + kTailFrames;
}

// The chunks (whole ones and the tail) of the clip the engine generates for `frames` frames (the
// smallest 17n+5 at or above max(frames, 22) has n + 1): 4 for the tiny default's 48, 8 for the
// release's 124.
constexpr int64_t clip_chunks(int64_t frames) {
  const int64_t f = std::max<int64_t>(frames, kMinDecodedFrames);
  return (f - kTailFrames + kChunkFrames - 1) / kChunkFrames + 1;
}

// The pixel frames video latent k of a clip spans: a chunk's first latent 1, each other 4.
constexpr int64_t latent_frames_spanned(int64_t latent) {
  return latent % kChunkLatents == 0 ? 1 : kFramesPerLatent;
}

// The index of chunk c's first frame in its clip or stream.
constexpr int64_t chunk_first_frame(int64_t chunk) {
  return chunk * kChunkFrames;
}

// Seconds from the clip's start to chunk c's first frame: c * 17 / 24 (the prompt timeline's and a
// live prompt change's clock).
constexpr double chunk_start_seconds(int64_t chunk) {
  return static_cast<double>(chunk) * kChunkFrames / kFps;
}

// The duration of `frames` frames in seconds.
constexpr double frames_seconds(int64_t frames) {
  return static_cast<double>(frames) / kFps;
}

// How many seconds of a video reference (and of a reference's sound) a clip of `frames` frames
// can use, and so what a reader needs to decode of it: the frames the engine generates for the
// clip (17n+5 of at least max(frames, 22), fewer than max(frames, 22) + 17), and no more. `frames`
// is the clip's length as planned: the request's, or the model's default when it asks for none.
constexpr double reference_read_seconds(int64_t frames) {
  return static_cast<double>(std::max<int64_t>(frames, kMinDecodedFrames) + kChunkFrames) / kFps;
}

}  // namespace h3::dit
