// A Ref2VA video reference's frame arithmetic, as the reference pipelines do it (diffusers'
// MiniMax-H3 setup, text and reference-encoder steps; docs/conditioning.md): the frames onto the
// model's 24 fps by whole-frame repeats, the 17n+5 of them the VAE encodes, and the ones the
// conditioner reads at 2 fps, merged in pairs, each pair labelled with its mean time; and a
// reference's sound onto the clip's duration and the audio VAE's rate.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "h3/request.h"

namespace h3 {

// How many times each of `n` frames at `fps` is shown on the 24 fps grid: frame i holds from slot
// floor(i * 24 / fps + 0.5) to the next frame's (the last to floor(n * 24 / fps + 0.5)), as
// ffmpeg's fps filter drops and repeats. fps 24: once each.
std::vector<int64_t> frame_repeats(int64_t n, double fps);

// The frames the VAE encodes of `frames` at 24 fps: snapped down to 17m + 5 (at least 22), or all
// of them when there are fewer than 22.
int64_t encoded_frames(int64_t frames);
// The latent frames the VAE makes of `encoded` frames (whole clips of 17, the last 3 latents
// dropped): 5n+2 for 17n+5, 2 for 13 to 17, 7 for 18 to 21.
int64_t encoded_latent_frames(int64_t encoded);

// The indices of the frames (of `frames` at 24 fps) the conditioner reads: one every 12.
std::vector<int64_t> conditioner_frames(int64_t frames);

// The time of each vision block of `sampled` frames read at 2 fps and merged in pairs (the last
// repeated to a whole pair): the mean of its two frames' times, in seconds.
std::vector<double> block_seconds(int64_t sampled);

// A video reference on the model's clock and canvas: each frame repeated onto 24 fps
// (frame_repeats), cut to r.frames, each kept frame stretched (Pillow's Lanczos) to r.width x
// r.height; uint8 [r.frames, r.height, r.width, 3].
at::Tensor normalized_video(const Video& v, const PlannedReference& r);

// A reference's sound as the audio VAE encodes it: cut at its own rate to the clip's
// `generated_frames` (int(frames / 24 · rate) samples), mono repeated onto both channels,
// resampled onto `vae_rate` (audio/resample.h); fp32 [2, N].
at::Tensor normalized_sound(const Audio& a, int64_t generated_frames, int64_t vae_rate);

}  // namespace h3
