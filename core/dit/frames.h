// Frame, latent and canvas arithmetic of MiniMax-H3 (docs/h3-model.md §12), shared by the DiT, the
// sampler, the VAE and the engine: pixel frames 17n+5 <-> latent frames 5n+2, a canvas that is a
// multiple of 32 pixels (latent = pixels / 16), audio latents = round(frames * 5 / 3) per channel.
// The clock these count with (24 fps, chunks of 17 frames and 5 latents) is model_clock.h's.
#pragma once

#include <cstdint>

#include "h3/model_clock.h"

namespace h3::dit {

constexpr int64_t kCanvasMultiple = 32;   // pixels
constexpr int64_t kVaeSpatialRatio = 16;  // pixels per latent
// The release's audio VAE hop (32 kHz / 40 latents per second). The waveform's rate and hop are
// the model's own (ModelInfo::audio_rate, audio_hop, from audio_vae/'s config); this is only what
// a plan counts with when the model has none.
constexpr int64_t kAudioSamplesPerLatent = 800;

bool is_valid_pixel_frames(int64_t frames);  // 17n+5, n >= 0
bool is_valid_latent_frames(int64_t t);      // 5n+2, n >= 0
// 17n+5 -> 5n+2; throws h3::Error(kInvalidArgument) for any other count.
int64_t latent_frames_for(int64_t pixel_frames);
// 5n+2 -> 17n+5; throws h3::Error(kInvalidArgument) for any other count.
int64_t pixel_frames_for(int64_t latent_frames);
// The smallest 17n+5 >= requested (>= 1): what the reference pipelines generate for a request.
int64_t snap_pixel_frames(int64_t requested);
// Audio latents per stereo channel for a clip: round(frames / 24 * 40).
int64_t audio_latents_for(int64_t pixel_frames);

// Throws h3::Error(kInvalidArgument) unless width and height are positive multiples of 32.
void check_canvas(int64_t width, int64_t height);

// The latent shapes of a clip: video [1, 24, T, h, w] and stereo audio [2 * audio, 32].
struct LatentGeometry {
  int64_t frames = 0, width = 0, height = 0;  // pixels
  int64_t t = 0, h = 0, w = 0;                // video latents
  int64_t audio = 0;                          // audio latents per channel
};
// Validates frames (17n+5) and the canvas (multiples of 32).
LatentGeometry latent_geometry(int64_t pixel_frames, int64_t width, int64_t height);

}  // namespace h3::dit
