// The packed sequence the DiT runs on (docs/h3-model.md §5): rows [text L | keyframes K | audio 2A |
// video V] (K = 0 for T2VA; FL2VA's keyframe blocks, one latent frame each, otherwise),
// video patchified (1, 2, 2) channel-major, stereo audio rows (left then right), fp64 (t, h, w)
// positions, per-row modality tags and timesteps. Audio rows always stay in the sequence: they
// share attention with the video.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "dit/config.h"

namespace h3::dit {

// Modality tags of rows (they index the AdaLN table; -1 pad rows use the video row).
constexpr int64_t kTagVideo = 0;
constexpr int64_t kTagText = 1;
constexpr int64_t kTagAudio = 2;

// FL2VA: the released model holds a keyframe just short of clean, at t = 0.999 (and at the video's
// t once that is later), its latent mixed 0.999 z + 0.001 n once before the first step.
constexpr float kKeyframeTimestep = 0.999f;

// Where a condition block sits. FL2VA's keyframes, on the video's latent canvas: at the first
// latent frame's time (L), or at the last one's (L + the generated frames' span - 5/3). A Ref2VA
// reference, at its own latent size, on a clock that starts at L: an image (one latent frame)
// takes one slot, a video (5n+2 latent frames, spaced as the generated ones) its frames' span;
// the generated audio and video then start where the references leave the clock.
enum class KeyframeAnchor { kFirst, kLast, kReference };

struct Keyframe {
  // [1, in_channels, 1, h, w], noised as the reference does (the caller's job); h and w the
  // video's for kFirst / kLast, the reference's own (multiples of the patch) for kReference,
  // whose video references have T = 5n+2 latent frames. Undefined for an audio reference.
  at::Tensor latent;
  KeyframeAnchor anchor = KeyframeAnchor::kFirst;
  // kReference only: the sound it conditions on (an audio reference's, a video's soundtrack),
  // normalised audio-VAE rows [2·A, audio_in_channels], left channel first, clean (never noised,
  // held at t = kSoundTimestep); packed just before the reference's video rows, at the same time.
  at::Tensor audio_rows;
};

// Ref2VA: a reference's sound is held clean, at t = 1.
constexpr float kSoundTimestep = 1.0f;

// The reference's noising of a keyframe before the first step: t z + (1 - t) n at t = 0.999, in
// fp32 (the rectified-flow forward process at the keyframe level), z and n [1, C, 1, h, w].
at::Tensor noised_keyframe(const at::Tensor& clean, const at::Tensor& noise);

// One denoiser evaluation's inputs as the pipeline holds them.
struct DitInputs {
  at::Tensor text;       // [L, text_dim] text-encoder hidden states
  at::Tensor text_tags;  // [L] integer tags (1 text, 0 vision tokens); undefined: all text
  at::Tensor video;      // [1, in_channels, T, h, w] noisy latents, T = 5n+2, h and w multiples of the patch
  at::Tensor audio;      // [2A, audio_in_channels] noisy stereo latents (left rows, then right rows)
  float t_video = 0.f;   // t = 1 - sigma of the video (also used by text rows)
  float t_audio = 0.f;   // t = 1 - sigma of the audio
  // Condition blocks, in packed order (empty: T2VA): FL2VA keyframes or Ref2VA references, not
  // both. Their pictures' rows are video rows (tag 0) at max(t_video, kKeyframeTimestep), their
  // sound's audio rows (tag 2) at kSoundTimestep; the forward returns no velocity for them (the
  // sampler never moves them).
  std::vector<Keyframe> keyframes;
};

struct PackedLayout {
  int64_t text = 0, keyframes = 0, audio = 0, video = 0;  // rows of each part
  int64_t t = 0, h = 0, w = 0;                            // video latent grid
  int64_t rows() const { return text + keyframes + audio + video; }
  int64_t keyframes_begin() const { return text; }
  int64_t audio_begin() const { return text + keyframes; }
  int64_t video_begin() const { return text + keyframes + audio; }
};

// A run of condition rows of one kind, in packed order.
struct ConditionRun {
  bool audio = false;  // rows of condition_audio_rows, else of keyframe_rows
  int64_t rows = 0;
};

struct PackedSequence {
  PackedLayout layout;              // layout.keyframes counts every condition row, pictures' and sound's
  at::Tensor text;                  // [L, text_dim]
  at::Tensor keyframe_rows;         // [Kv, in_channels * 4] fp32: the pictures' condition rows
  at::Tensor condition_audio_rows;  // [Ka, audio_in_channels] fp32: the references' sound
  std::vector<ConditionRun> condition_runs;  // how the two interleave (Kv + Ka = layout.keyframes)
  at::Tensor audio_rows;                     // [2A, audio_in_channels] fp32
  at::Tensor video_rows;  // [V, in_channels * 4] fp32, rows (t, h/2, w/2), columns c*4 + ph*2 + pw
  at::Tensor positions;   // [S, 3] fp64
  at::Tensor tags;        // [S] int64
  at::Tensor timesteps;   // [S] fp32
};

// Validates the inputs against the config (h3::Error(kInvalidArgument) naming the input and what
// the model needs) and builds the packed sequence.
PackedSequence pack(const DitConfig& c, const DitInputs& in);

// [1, C, T, h, w] -> [T * h/ph * w/pw, C * ph * pw] and back.
at::Tensor patchify_video(const at::Tensor& latents, int64_t ph, int64_t pw);
at::Tensor unpatchify_video(const at::Tensor& rows, int64_t channels, int64_t t, int64_t h, int64_t w,
                            int64_t ph, int64_t pw);

// The fp64 positions of the packed rows: text (i, 0, 0); audio (L + a, 0, w_first / w_last);
// video frame k at t = L + sum_{j<k} 5/3 * (1, 4, 4, 4, 4)[j mod 5] with the area-normalised
// spatial grid. `grid_h` and `grid_w` are the video's patch rows and columns.
at::Tensor packed_positions(int64_t text_rows, int64_t audio_latents, int64_t t, int64_t grid_h,
                            int64_t grid_w);
// The positions of one keyframe block [grid_h * grid_w, 3]: t at the anchor's time (the first
// latent frame's, L; the last one's, L + the span of t latent frames - 5/3, summed as the reference
// sums it), the video's spatial grid.
at::Tensor keyframe_positions(KeyframeAnchor anchor, int64_t text_rows, int64_t t, int64_t grid_h,
                              int64_t grid_w);

// The positions of 2 * audio_latents audio rows and t latent frames of grid_h x grid_w patches
// from `origin` (packed_positions less the text); `span`, when given, receives the frames' time
// span summed in order (what a Ref2VA video reference advances the clock by).
at::Tensor media_positions(double origin, int64_t audio_latents, int64_t t, int64_t grid_h, int64_t grid_w,
                           double* span = nullptr);

// The positions of a block of one latent frame of grid_h x grid_w patches at `time`, with its own
// area-normalised spatial grid (a Ref2VA reference's).
at::Tensor frame_positions(double time, int64_t grid_h, int64_t grid_w);

// The area-normalised spatial grid of one axis of `n` patches in a grid of grid_h x grid_w patches.
std::vector<double> spatial_grid(int64_t n, int64_t grid_h, int64_t grid_w);

}  // namespace h3::dit
