#include "dit/packed_sequence.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/shape.h"
#include "dit/frames.h"
#include "h3/error.h"

namespace h3::dit {
namespace {

[[noreturn]] void bad(const std::string& what) {
  throw Error(ErrorKind::kInvalidArgument, what);
}

void check_float(const at::Tensor& t, const char* name) {
  if (!t.defined()) bad(std::string("DiT input '") + name + "' is missing");
  if (!at::isFloatingType(t.scalar_type()))
    bad(std::string("DiT input '") + name + "' must be a floating tensor");
}

void check_t(float t, const char* name) {
  if (!std::isfinite(t) || t < 0.f || t > 1.f) {
    bad(std::string("DiT input '") + name + "' = " + std::to_string(t) +
        ": t = 1 - sigma must lie in [0, 1]");
  }
}

// numpy's pairwise summation of a float64 array (numpy/core/src/umath/loops_utils.h): the
// reference sums the last keyframe's span so, and from 16 terms on it differs from a running sum
// in the last ulp.
double pairwise_sum(const double* a, int64_t n) {
  if (n < 8) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += a[i];
    return s;
  }
  if (n <= 128) {
    double r[8];
    for (int k = 0; k < 8; ++k) r[k] = a[k];
    int64_t i = 8;
    for (; i < n - n % 8; i += 8) {
      for (int k = 0; k < 8; ++k) r[k] += a[i + k];
    }
    double s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) s += a[i];
    return s;
  }
  int64_t half = n / 2;
  half -= half % 8;
  return pairwise_sum(a, half) + pairwise_sum(a + half, n - half);
}

}  // namespace

at::Tensor patchify_video(const at::Tensor& latents, int64_t ph, int64_t pw) {
  const int64_t c = latents.size(1), t = latents.size(2), h = latents.size(3), w = latents.size(4);
  return latents.reshape({c, t, h / ph, ph, w / pw, pw})
      .permute({1, 2, 4, 0, 3, 5})
      .reshape({t * (h / ph) * (w / pw), c * ph * pw});
}

at::Tensor unpatchify_video(const at::Tensor& rows, int64_t channels, int64_t t, int64_t h, int64_t w,
                            int64_t ph, int64_t pw) {
  return rows.reshape({t, h / ph, w / pw, channels, ph, pw})
      .permute({3, 0, 1, 4, 2, 5})
      .reshape({1, channels, t, h, w});
}

std::vector<double> spatial_grid(int64_t n, int64_t grid_h, int64_t grid_w) {
  // numpy.linspace(start, start + r, n, endpoint=False) * 32 with r = n / sqrt(grid_h * grid_w):
  // the grid spans the same area whatever the aspect ratio.
  const double r = static_cast<double>(n) / std::sqrt(static_cast<double>(grid_h * grid_w));
  const double start = (1.0 - r) / 2.0;
  const double step = ((start + r) - start) / static_cast<double>(n);
  std::vector<double> g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) g[static_cast<size_t>(i)] = (static_cast<double>(i) * step + start) * 32.0;
  return g;
}

at::Tensor media_positions(double origin, int64_t audio_latents, int64_t t, int64_t grid_h, int64_t grid_w,
                           double* span) {
  auto pos = at::zeros({2 * audio_latents + t * grid_h * grid_w, 3}, at::kDouble);
  double* p = pos.data_ptr<double>();
  const auto gh = spatial_grid(grid_h, grid_h, grid_w);
  const auto gw = spatial_grid(grid_w, grid_h, grid_w);
  int64_t r = 0;
  // Audio runs on a 40 Hz clock (one latent per unit), pinned to the grid's left / right edge.
  for (int64_t ch = 0; ch < 2; ++ch) {
    const double w = ch == 0 ? gw.front() : gw.back();
    for (int64_t a = 0; a < audio_latents; ++a, ++r) {
      p[r * 3] = origin + static_cast<double>(a);
      p[r * 3 + 2] = w;
    }
  }
  // A latent frame spans 5/3 per pixel frame it covers (latent_frames_spanned: the first latent of
  // each 17-frame clip 1 pixel frame, the other four 4 each).
  // The reference adds the origin to the spans' running sum from 0 (origin + cumsum), which
  // differs in the last ulp from accumulating onto the origin for some origins.
  double elapsed = 0.0;
  for (int64_t k = 0; k < t; ++k) {
    const double ft = origin + elapsed;
    for (int64_t i = 0; i < grid_h; ++i) {
      for (int64_t j = 0; j < grid_w; ++j, ++r) {
        p[r * 3] = ft;
        p[r * 3 + 1] = gh[static_cast<size_t>(i)];
        p[r * 3 + 2] = gw[static_cast<size_t>(j)];
      }
    }
    elapsed += kAudioLatentsPerFrame * static_cast<double>(latent_frames_spanned(k));
  }
  if (span) *span = elapsed;  // summed in order, as the reference sums a video reference's span
  return pos;
}

at::Tensor packed_positions(int64_t text_rows, int64_t audio_latents, int64_t t, int64_t grid_h,
                            int64_t grid_w) {
  auto text = at::zeros({text_rows, 3}, at::kDouble);
  text.select(1, 0).copy_(at::arange(text_rows, at::kDouble));
  return at::cat({text, media_positions(static_cast<double>(text_rows), audio_latents, t, grid_h, grid_w)});
}

at::Tensor noised_keyframe(const at::Tensor& clean, const at::Tensor& noise) {
  const float t = kKeyframeTimestep, rest = 1.0f - kKeyframeTimestep;  // 1 - t in fp32, as the reference
  return clean.to(at::kFloat).mul(t).add(noise.to(at::kFloat).mul(rest));
}

at::Tensor keyframe_positions(KeyframeAnchor anchor, int64_t text_rows, int64_t t, int64_t grid_h,
                              int64_t grid_w) {
  double time = static_cast<double>(text_rows);
  if (anchor == KeyframeAnchor::kLast) {
    std::vector<double> spans(static_cast<size_t>(t));
    for (int64_t k = 0; k < t; ++k) {
      spans[static_cast<size_t>(k)] = kAudioLatentsPerFrame * static_cast<double>(latent_frames_spanned(k));
    }
    time = static_cast<double>(text_rows) + pairwise_sum(spans.data(), t) - kAudioLatentsPerFrame;
  }
  return frame_positions(time, grid_h, grid_w);
}

at::Tensor frame_positions(double time, int64_t grid_h, int64_t grid_w) {
  const auto gh = spatial_grid(grid_h, grid_h, grid_w);
  const auto gw = spatial_grid(grid_w, grid_h, grid_w);
  auto pos = at::empty({grid_h * grid_w, 3}, at::kDouble);
  double* p = pos.data_ptr<double>();
  for (int64_t i = 0, r = 0; i < grid_h; ++i) {
    for (int64_t j = 0; j < grid_w; ++j, ++r) {
      p[r * 3] = time;
      p[r * 3 + 1] = gh[static_cast<size_t>(i)];
      p[r * 3 + 2] = gw[static_cast<size_t>(j)];
    }
  }
  return pos;
}

PackedSequence pack(const DitConfig& c, const DitInputs& in) {
  check_float(in.text, "text");
  check_float(in.video, "video");
  check_float(in.audio, "audio");
  if (in.text.dim() != 2 || in.text.size(0) < 1) {
    bad("DiT input 'text' has shape " + shape_string(in.text.sizes()) + ": give [L, " +
        std::to_string(c.text_dim) + "] text embeddings with L >= 1");
  }
  if (in.text.size(1) != c.text_dim) {
    bad("DiT input 'text' has width " + std::to_string(in.text.size(1)) + " but the model's text_dim is " +
        std::to_string(c.text_dim) +
        ": give the hidden states of the text encoder this transformer was trained with");
  }
  const int64_t l = in.text.size(0);
  if (in.video.dim() != 5 || in.video.size(0) != 1 || in.video.size(1) != c.in_channels) {
    bad("DiT input 'video' has shape " + shape_string(in.video.sizes()) + ": give [1, " +
        std::to_string(c.in_channels) + ", T, h, w] latents");
  }
  const int64_t t = in.video.size(2), h = in.video.size(3), w = in.video.size(4);
  const int64_t ph = c.patch[1], pw = c.patch[2];
  if (!is_valid_latent_frames(t)) {
    bad("DiT input 'video' has " + std::to_string(t) +
        " latent frames: the model represents 5n+2 latent frames (17n+5 pixel frames: 5, 22, 39, ..., 124, "
        "...)");
  }
  if (h <= 0 || w <= 0 || h % ph != 0 || w % pw != 0) {
    bad("DiT input 'video' has a " + std::to_string(h) + "x" + std::to_string(w) +
        " latent canvas: latent height and width must be multiples of the patch (" + std::to_string(ph) +
        "x" + std::to_string(pw) + "), i.e. the canvas must be a multiple of 32 pixels");
  }
  if (in.audio.dim() != 2 || in.audio.size(1) != c.audio_in_channels || in.audio.size(0) < 2 ||
      in.audio.size(0) % 2 != 0) {
    bad("DiT input 'audio' has shape " + shape_string(in.audio.sizes()) + ": give stereo latents [2A, " +
        std::to_string(c.audio_in_channels) + "] (A >= 1 left rows, then A right rows)");
  }
  check_t(in.t_video, "t_video");
  check_t(in.t_audio, "t_audio");
  at::Tensor text_tags;
  if (in.text_tags.defined()) {
    if (in.text_tags.dim() != 1 || in.text_tags.size(0) != l ||
        at::isFloatingType(in.text_tags.scalar_type())) {
      bad("DiT input 'tags' has shape " + shape_string(in.text_tags.sizes()) +
          ": give one integer tag per text row [" + std::to_string(l) + "]");
    }
    text_tags = in.text_tags.to(at::kCPU, at::kLong);
    if (text_tags.lt(-1).any().item<bool>() || text_tags.gt(2).any().item<bool>()) {
      bad("DiT input 'tags' holds values outside {-1, 0, 1, 2} (0 video/vision, 1 text, 2 audio, -1 pad)");
    }
  } else {
    text_tags = at::full({l}, kTagText, at::kLong);
  }

  int64_t references = 0;
  for (size_t i = 0; i < in.keyframes.size(); ++i) {
    const auto& k = in.keyframes[i].latent;
    const bool reference = in.keyframes[i].anchor == KeyframeAnchor::kReference;
    references += reference ? 1 : 0;
    const std::string name = "DiT input 'keyframe " + std::to_string(i) + "'";
    const at::Tensor& a = in.keyframes[i].audio_rows;
    if (a.defined()) {
      if (!reference || !at::isFloatingType(a.scalar_type()) || a.dim() != 2 ||
          a.size(1) != c.audio_in_channels || a.size(0) < 2 || a.size(0) % 2 != 0) {
        bad(name + "'s sound has shape " + shape_string(a.sizes()) +
            ": a reference's sound is stereo rows [2A, " + std::to_string(c.audio_in_channels) +
            "] (floating point), and only a Ref2VA reference has one");
      }
      if (!k.defined()) continue;  // an audio reference: sound alone
      if (k.dim() == 5 && k.size(2) == 1)
        bad(name + " is an image reference with sound: only a video has a soundtrack");
    }
    if (reference) {
      if (!k.defined() || !at::isFloatingType(k.scalar_type()) || k.dim() != 5 || k.size(0) != 1 ||
          k.size(1) != c.in_channels || (k.size(2) != 1 && !is_valid_latent_frames(k.size(2))) ||
          k.size(3) < ph || k.size(4) < pw || k.size(3) % ph != 0 || k.size(4) % pw != 0) {
        bad(name + " (a reference) has shape " +
            (k.defined() ? shape_string(k.sizes()) : std::string("(none)")) +
            ": give an image's latent frame [1, " + std::to_string(c.in_channels) +
            ", 1, h, w] or a video's 5n+2 [1, " + std::to_string(c.in_channels) +
            ", T, h, w], h and w multiples of the patch (floating point)");
      }
      continue;
    }
    if (!k.defined() || !at::isFloatingType(k.scalar_type()) || k.dim() != 5 || k.size(0) != 1 ||
        k.size(1) != c.in_channels || k.size(2) != 1 || k.size(3) != h || k.size(4) != w) {
      bad(name + " has shape " + (k.defined() ? shape_string(k.sizes()) : std::string("(none)")) +
          ": give one latent frame [1, " + std::to_string(c.in_channels) + ", 1, " + std::to_string(h) +
          ", " + std::to_string(w) + "] on the video's latent canvas (floating point)");
    }
  }
  if (references > 0 && references != static_cast<int64_t>(in.keyframes.size())) {
    bad("DiT inputs mix FL2VA keyframes with Ref2VA references: a request is one task or the other");
  }

  PackedSequence s;
  const int64_t a = in.audio.size(0) / 2, gh = h / ph, gw = w / pw;
  std::vector<at::Tensor> keyframe_rows, sound_rows, keyframe_pos;
  int64_t k = 0;
  auto run = [&](bool audio, int64_t rows) {
    s.condition_runs.push_back({audio, rows});
    k += rows;
  };
  // The shared clock of the references: from the end of the text, an image takes one slot, sound
  // alone its latents, a video its latent frames' span (or its soundtrack's latents, if longer);
  // the generated audio and video then start where they leave it.
  double clock = static_cast<double>(l);
  for (size_t i = 0; i < in.keyframes.size(); ++i) {
    const Keyframe& kf = in.keyframes[i];
    if (kf.anchor != KeyframeAnchor::kReference) {
      keyframe_rows.push_back(patchify_video(kf.latent.to(at::kFloat), ph, pw));
      run(false, keyframe_rows.back().size(0));
      keyframe_pos.push_back(keyframe_positions(kf.anchor, l, t, gh, gw));
      continue;
    }
    const int64_t sound_latents = kf.audio_rows.defined() ? kf.audio_rows.size(0) / 2 : 0;
    if (sound_latents > 0) {
      sound_rows.push_back(kf.audio_rows.to(at::kFloat));
      run(true, 2 * sound_latents);
    }
    if (!kf.latent.defined()) {
      // Sound alone, pinned to the edges of the generated video's grid.
      keyframe_pos.push_back(media_positions(clock, sound_latents, 0, gh, gw));
      clock += static_cast<double>(sound_latents);
      continue;
    }
    keyframe_rows.push_back(patchify_video(kf.latent.to(at::kFloat), ph, pw));
    run(false, keyframe_rows.back().size(0));
    const int64_t frames = kf.latent.size(2), rh = kf.latent.size(3) / ph, rw = kf.latent.size(4) / pw;
    if (frames == 1) {
      keyframe_pos.push_back(frame_positions(clock, rh, rw));
      clock += 1.0;
    } else {
      // A soundtrack sits just before its video's rows, from the same time, pinned to the edges of
      // the reference's own grid.
      double span = 0.0;
      keyframe_pos.push_back(media_positions(clock, sound_latents, frames, rh, rw, &span));
      clock += std::max(static_cast<double>(sound_latents), span);
    }
  }
  s.layout = {l, k, 2 * a, t * gh * gw, t, h, w};
  s.text = in.text;
  s.keyframe_rows =
      !keyframe_rows.empty() ? at::cat(keyframe_rows) : at::empty({0, c.video_row_width()}, at::kFloat);
  s.condition_audio_rows =
      !sound_rows.empty() ? at::cat(sound_rows) : at::empty({0, c.audio_in_channels}, at::kFloat);
  s.audio_rows = in.audio.to(at::kFloat);
  s.video_rows = patchify_video(in.video.to(at::kFloat), ph, pw);
  const auto media = packed_positions(l, a, t, gh, gw);
  if (k > 0) {
    keyframe_pos.insert(keyframe_pos.begin(), media.narrow(0, 0, l));
    // The generated audio and video start after the references (FL2VA: at L).
    keyframe_pos.push_back(references > 0 ? media_positions(clock, a, t, gh, gw)
                                          : media.narrow(0, l, media.size(0) - l));
    s.positions = at::cat(keyframe_pos);
  } else {
    s.positions = media;
  }
  // Keyframes and pictures held at t = 0.999, or at the video's t once that is later; sound clean.
  const float t_keyframe = std::max(in.t_video, kKeyframeTimestep);
  std::vector<at::Tensor> tags{text_tags}, timesteps{at::full({l}, in.t_video, at::kFloat)};
  for (const ConditionRun& r : s.condition_runs) {
    tags.push_back(at::full({r.rows}, r.audio ? kTagAudio : kTagVideo, at::kLong));
    timesteps.push_back(at::full({r.rows}, r.audio ? kSoundTimestep : t_keyframe, at::kFloat));
  }
  tags.push_back(at::full({2 * a}, kTagAudio, at::kLong));
  tags.push_back(at::full({s.layout.video}, kTagVideo, at::kLong));
  timesteps.push_back(at::full({2 * a}, in.t_audio, at::kFloat));
  timesteps.push_back(at::full({s.layout.video}, in.t_video, at::kFloat));
  s.tags = at::cat(tags);
  s.timesteps = at::cat(timesteps);
  return s;
}

}  // namespace h3::dit
