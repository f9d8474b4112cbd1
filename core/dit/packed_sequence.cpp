#include "dit/packed_sequence.h"

#include <ATen/ATen.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/shape.h"
#include "dit/frames.h"

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

at::Tensor packed_positions(int64_t text_rows, int64_t audio_latents, int64_t t, int64_t grid_h,
                            int64_t grid_w) {
  const int64_t rows = text_rows + 2 * audio_latents + t * grid_h * grid_w;
  auto pos = at::zeros({rows, 3}, at::kDouble);
  double* p = pos.data_ptr<double>();
  const auto gh = spatial_grid(grid_h, grid_h, grid_w);
  const auto gw = spatial_grid(grid_w, grid_h, grid_w);
  const double base = static_cast<double>(text_rows);
  int64_t r = 0;
  for (int64_t i = 0; i < text_rows; ++i, ++r) p[r * 3] = static_cast<double>(i);
  // Audio runs on a 40 Hz clock (one latent per unit), pinned to the grid's left / right edge.
  for (int64_t ch = 0; ch < 2; ++ch) {
    const double w = ch == 0 ? gw.front() : gw.back();
    for (int64_t a = 0; a < audio_latents; ++a, ++r) {
      p[r * 3] = base + static_cast<double>(a);
      p[r * 3 + 2] = w;
    }
  }
  // A latent frame spans 5/3 per pixel frame: the first latent of each 17-frame clip covers 1
  // pixel frame, the other four 4 each.
  static const double kSpan[5] = {1, 4, 4, 4, 4};
  double ft = base;
  for (int64_t k = 0; k < t; ++k) {
    for (int64_t i = 0; i < grid_h; ++i) {
      for (int64_t j = 0; j < grid_w; ++j, ++r) {
        p[r * 3] = ft;
        p[r * 3 + 1] = gh[static_cast<size_t>(i)];
        p[r * 3 + 2] = gw[static_cast<size_t>(j)];
      }
    }
    ft += 5.0 / 3.0 * kSpan[k % 5];
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

  PackedSequence s;
  const int64_t a = in.audio.size(0) / 2, gh = h / ph, gw = w / pw;
  s.layout = {l, 2 * a, t * gh * gw, t, h, w};
  s.text = in.text;
  s.audio_rows = in.audio.to(at::kFloat);
  s.video_rows = patchify_video(in.video.to(at::kFloat), ph, pw);
  s.positions = packed_positions(l, a, t, gh, gw);
  s.tags = at::cat(
      {text_tags, at::full({2 * a}, kTagAudio, at::kLong), at::full({s.layout.video}, kTagVideo, at::kLong)});
  s.timesteps = at::cat({at::full({l}, in.t_video, at::kFloat), at::full({2 * a}, in.t_audio, at::kFloat),
                         at::full({s.layout.video}, in.t_video, at::kFloat)});
  return s;
}

}  // namespace h3::dit
