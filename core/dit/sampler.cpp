#include "dit/sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <string>
#include <vector>

#include "h3/error.h"

namespace h3::dit {

namespace {

// torch.linspace(1, 0, n) in fp32 exactly as the reference ran it (the golden grids): LibTorch's CPU
// kernel with AVX2, 8 fp32 lanes and two vectors per loop step. Each vector is its first point
// (counted up from the start in the first half, down from the end in the second) plus k steps,
// and the remainder point by point, so a grid point depends on the lane layout: LibTorch 2.x on
// AVX-512 (and other versions) round some points one ulp away. Written out so that the grid is
// the reference's whatever LibTorch and CPU run the engine.
std::vector<float> reference_linspace(int64_t n) {
  constexpr int64_t kLanes = 8;
  std::vector<float> g(static_cast<size_t>(n));
  const float start = 1.0f, end = 0.0f, step = (end - start) / static_cast<float>(n - 1);
  const int64_t halfway = n / 2;
  auto first = [&](int64_t i) {
    return i < halfway ? start + step * static_cast<float>(i) : end - step * static_cast<float>(n - i - 1);
  };
  int64_t i = 0;
  for (; i + 2 * kLanes <= n;) {  // two vectors per step
    for (int v = 0; v < 2; ++v, i += kLanes) {
      const float base = first(i);
      for (int64_t k = 0; k < kLanes; ++k)
        g[static_cast<size_t>(i + k)] = base + static_cast<float>(k) * step;
    }
  }
  for (; i < n; ++i) g[static_cast<size_t>(i)] = first(i);
  return g;
}

}  // namespace

Schedule make_schedule(int64_t grid_points, double shift) {
  if (grid_points < 2) {
    throw Error(ErrorKind::kInvalidArgument, "steps = " + std::to_string(grid_points) +
                                                 ": the schedule needs at least 2 grid points (N counts the "
                                                 "terminal 0, so N grid points make N - 1 evaluations)");
  }
  if (!(shift > 0)) throw Error(ErrorKind::kInvalidArgument, "the schedule's shift must be positive");
  // The reference computes this in fp32 tensor arithmetic, in this order; so do we, bit for bit.
  auto base = at::tensor(reference_linspace(grid_points), at::kFloat);
  auto sigmas = at::mul(base, shift).div(at::mul(base, shift - 1.0).add(1.0));
  sigmas = std::get<0>(at::unique_consecutive(sigmas));
  Schedule s;
  s.sigmas = sigmas;
  s.timesteps = at::rsub(sigmas.narrow(0, 0, sigmas.size(0) - 1), 1.0);
  return s;
}

at::Tensor euler_step(const at::Tensor& x, const at::Tensor& velocity, float t, float sigma,
                      float sigma_next) {
  const float sigma_t = 1.0f - t;
  auto x0 = x + velocity * sigma_t;
  const float r = sigma_next / sigma;
  return x * r + x0 * (1.0f - r);
}

Latents draw_noise(uint64_t seed, at::IntArrayRef video_shape, at::IntArrayRef audio_shape) {
  std::vector<at::Tensor> none;
  return draw_noise(seed, video_shape, audio_shape, {}, none);
}

Latents draw_noise(uint64_t seed, at::IntArrayRef video_shape, at::IntArrayRef audio_shape,
                   const std::vector<std::vector<int64_t>>& keyframe_shapes,
                   std::vector<at::Tensor>& keyframe_noise) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  keyframe_noise.clear();
  for (const auto& shape : keyframe_shapes) {
    keyframe_noise.push_back(at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat)));
  }
  Latents n;
  n.video = at::randn(video_shape, gen, at::TensorOptions().dtype(at::kFloat));
  n.audio = at::randn(audio_shape, gen, at::TensorOptions().dtype(at::kFloat));
  return n;
}

std::vector<TimestepSet> evaluation_timesteps(const Schedule& video, const Schedule& audio, bool keyframes,
                                              bool sound) {
  auto tv = video.timesteps.to(at::kCPU, at::kFloat).contiguous();
  auto ta = audio.timesteps.to(at::kCPU, at::kFloat).contiguous();
  const int64_t n = std::min(tv.numel(), ta.numel());
  std::vector<TimestepSet> sets;
  for (int64_t i = 0; i < n; ++i) {
    const float v = tv.data_ptr<float>()[i], a = ta.data_ptr<float>()[i];
    TimestepSet s = timestep_set(v, a);
    const float k = std::max(v, kKeyframeTimestep);
    if (keyframes && std::find(s.begin(), s.end(), k) == s.end()) {
      s.insert(std::upper_bound(s.begin(), s.end(), k), k);
    }
    if (sound && std::find(s.begin(), s.end(), kSoundTimestep) == s.end()) {
      s.insert(std::upper_bound(s.begin(), s.end(), kSoundTimestep), kSoundTimestep);
    }
    sets.push_back(std::move(s));
  }
  return sets;
}

Latents denoise(const Transformer& model, const DenoiseRequest& r, const StepCallback& on_step) {
  const int64_t steps = r.video.evaluations();
  if (r.audio.evaluations() != steps) {
    throw Error(ErrorKind::kInvalidArgument, "the video schedule has " + std::to_string(steps) +
                                                 " evaluations but the audio schedule " +
                                                 std::to_string(r.audio.evaluations()) + ": they must match");
  }
  auto sv = r.video.sigmas.to(at::kCPU).contiguous();
  auto sa = r.audio.sigmas.to(at::kCPU).contiguous();
  auto tv = r.video.timesteps.to(at::kCPU).contiguous();
  auto ta = r.audio.timesteps.to(at::kCPU).contiguous();
  Latents x{r.noise.video.to(at::kFloat), r.noise.audio.to(at::kFloat)};
  for (int64_t i = 0; i < steps; ++i) {
    DitInputs in;
    in.text = r.text;
    in.text_tags = r.text_tags;
    in.video = x.video;
    in.audio = x.audio;
    in.t_video = tv[i].item<float>();
    in.t_audio = ta[i].item<float>();
    in.keyframes = r.keyframes;
    auto v = model.forward(in);
    x.video = euler_step(x.video, v.video.to(x.video.device()), in.t_video, sv[i].item<float>(),
                         sv[i + 1].item<float>());
    x.audio = euler_step(x.audio, v.audio.to(x.audio.device()), in.t_audio, sa[i].item<float>(),
                         sa[i + 1].item<float>());
    if (on_step) on_step(i, steps, x);
  }
  return x;
}

}  // namespace h3::dit
