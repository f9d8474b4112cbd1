#include "engine/stages/reference_frames.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "audio/resample.h"
#include "dit/frames.h"
#include "image/keyframes.h"

namespace h3 {
namespace {

// The conditioner's rate (diffusers' video_sample_fps) and Qwen3-VL's temporal patch.
constexpr double kSampleFps = 2.0;
constexpr int64_t kTemporalPatch = 2;

}  // namespace

std::vector<int64_t> frame_repeats(int64_t n, double fps) {
  std::vector<int64_t> repeats(static_cast<size_t>(n), 1);
  const double target = static_cast<double>(dit::kFps);
  if (fps == target) return repeats;
  const double scale = target / fps;
  auto slot = [&](int64_t i) {
    return static_cast<int64_t>(std::floor(static_cast<double>(i) * scale + 0.5));
  };
  for (int64_t i = 0; i < n; ++i) repeats[static_cast<size_t>(i)] = slot(i + 1) - slot(i);
  return repeats;
}

int64_t encoded_frames(int64_t frames) {
  // The reference snaps to max(1, (n - 5) // 17) * 17 + 5 and takes that many of the frames: a
  // video shorter than 22 frames is encoded whole.
  return std::min(frames,
                  dit::clip_frames(std::max<int64_t>(1, (frames - dit::kTailFrames) / dit::kChunkFrames)));
}

int64_t encoded_latent_frames(int64_t encoded) {
  // The VAE encodes whole clips of 17 (the last frame repeated), 5 latent frames each, and drops
  // the last 3: 17n+5 frames give 5n+2, 13 to 17 give 2, 18 to 21 give 7.
  return (encoded + dit::kChunkFrames - 1) / dit::kChunkFrames * dit::kChunkLatents - dit::kDroppedLatents;
}

std::vector<int64_t> conditioner_frames(int64_t frames) {
  // Python's round() of a running float cursor, duplicates dropped.
  const double stride = static_cast<double>(dit::kFps) / kSampleFps;
  std::vector<int64_t> indices;
  double cursor = 0.0;
  for (;;) {
    const auto i = static_cast<int64_t>(std::nearbyint(cursor));
    if (i >= frames) break;
    if (indices.empty() || i > indices.back()) indices.push_back(i);
    cursor += stride;
  }
  return indices;
}

std::vector<double> block_seconds(int64_t sampled) {
  std::vector<double> t;
  for (int64_t i = 0; i < sampled; ++i) t.push_back(static_cast<double>(i) / kSampleFps);
  while (!t.empty() && t.size() % kTemporalPatch != 0) t.push_back(t.back());
  std::vector<double> blocks;
  for (size_t i = 0; i < t.size(); i += kTemporalPatch)
    blocks.push_back((t[i] + t[i + kTemporalPatch - 1]) / 2);
  return blocks;
}

at::Tensor normalized_video(const Video& v, const PlannedReference& r) {
  const std::vector<int64_t> repeats = frame_repeats(
      static_cast<int64_t>(v.frames.size()), static_cast<double>(v.fps_n) / static_cast<double>(v.fps_d));
  at::Tensor out = at::empty({r.frames, r.height, r.width, 3}, at::kByte);
  int64_t next = 0;
  for (size_t i = 0; i < v.frames.size() && next < r.frames; ++i) {
    if (repeats[i] == 0) continue;  // dropped by the resampling: never resized
    const image::Rgb8 frame = image::stretch_onto({v.width, v.height, v.frames[i]}, r.width, r.height);
    const at::Tensor t =
        at::from_blob(const_cast<uint8_t*>(frame.rgb.data()), {r.height, r.width, 3}, at::kByte);
    for (int64_t n = 0; n < repeats[i] && next < r.frames; ++n) out[next++].copy_(t);
  }
  return out;
}

at::Tensor normalized_sound(const Audio& a, int64_t generated_frames, int64_t vae_rate) {
  const int64_t kept = std::min(
      a.frames(), static_cast<int64_t>(dit::frames_seconds(generated_frames) * static_cast<double>(a.rate)));
  // [frames, channels] interleaved -> [channels, kept]
  at::Tensor wave = at::from_blob(const_cast<float*>(a.samples.data()), {a.frames(), a.channels}, at::kFloat)
                        .narrow(0, 0, kept)
                        .t();
  if (a.channels == 1) wave = wave.expand({2, kept});
  return audio::resample(wave.contiguous(), a.rate, vae_rate);
}

}  // namespace h3
