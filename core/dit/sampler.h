// The flow-matching sampler of H3 (docs/h3-model.md §6): t = 1 - sigma, t = 1 clean; the model's
// velocity is data-ward (x0 = x + (1 - t) v); shifted linspace grids (video shift 12, audio 3)
// whose N counts the grid points including the terminal 0; Euler steps with eta = 0; seeded
// noise drawn as the reference pipelines draw it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "dit/transformer.h"

namespace h3::dit {

constexpr double kVideoShift = 12.0;
constexpr double kAudioShift = 3.0;

struct Schedule {
  at::Tensor sigmas;     // [K] fp32, from 1 down to 0, consecutive duplicates removed
  at::Tensor timesteps;  // [K - 1] fp32, t = 1 - sigma of each evaluation
  int64_t evaluations() const { return timesteps.size(0); }
};

// base = linspace(1, 0, N) in fp32; sigma = shift * base / (1 + (shift - 1) * base) in fp32;
// consecutive duplicates removed. N >= 2 grid points (N - 1 evaluations before de-duplication).
Schedule make_schedule(int64_t grid_points, double shift);

// One Euler step from sigma to sigma_next given the velocity at timestep t (= 1 - sigma):
// x0 = x + (1 - t) v; r = sigma_next / sigma; x_next = r x + (1 - r) x0, in fp32.
at::Tensor euler_step(const at::Tensor& x, const at::Tensor& velocity, float t, float sigma,
                      float sigma_next);

struct Latents {
  at::Tensor video;  // [1, 24, T, h, w] fp32
  at::Tensor audio;  // [2A, 32] fp32
};

// Noise for a seed: one CPU generator seeded with `seed`, fp32 standard normals, first the
// video latents, then the audio latents (the same numbers as torch.Generator("cpu").manual_seed
// followed by two torch.randn calls).
Latents draw_noise(uint64_t seed, at::IntArrayRef video_shape, at::IntArrayRef audio_shape);
// FL2VA and Ref2VA: the same generator draws first one noise per condition block, of its shape
// (into `keyframe_noise`, in packed order: keyframes, or references at their own sizes), then the
// video and the audio: the order the reference pipelines consume a request's generator in, so
// that a seed gives their clip.
Latents draw_noise(uint64_t seed, at::IntArrayRef video_shape, at::IntArrayRef audio_shape,
                   const std::vector<std::vector<int64_t>>& keyframe_shapes,
                   std::vector<at::Tensor>& keyframe_noise);

struct DenoiseRequest {
  at::Tensor text;       // [L, text_dim]
  at::Tensor text_tags;  // [L] or undefined (all text)
  Latents noise;         // the starting latents (sigma = 1)
  Schedule video;        // video schedule (shift 12 in the release)
  Schedule audio;        // audio schedule (shift 3); same number of evaluations as the video's
  // FL2VA keyframes (noised once, already): in every evaluation, never stepped.
  std::vector<Keyframe> keyframes;
};

// Called after every step with the step index (0-based), the number of steps and the latents so
// far; it may throw to stop (e.g. after a collectively agreed cancellation).
using StepCallback = std::function<void(int64_t step, int64_t steps, const Latents& latents)>;

// The distinct timesteps of each evaluation denoise() runs with these schedules (text and video
// rows at the video's t, audio rows at the audio's, keyframe rows, when there are any, at
// max(t_video, 0.999), a reference's sound, when there is any, at 1): the sets its AdaLN tables
// need.
std::vector<TimestepSet> evaluation_timesteps(const Schedule& video, const Schedule& audio,
                                              bool keyframes = false, bool sound = false);

// Runs every evaluation of the schedules: a collective over the transformer's group (every rank
// calls it with the same request and gets the same latents).
Latents denoise(const Transformer& model, const DenoiseRequest& request, const StepCallback& on_step = {});

}  // namespace h3::dit
