// What a clip of the trained default model (data/default, train/tiny) shows and sounds like,
// measured on its output alone: each pixel is classified to the nearest colour of the training
// palette (train/tiny/data.py: six foreground colours, three backgrounds), the foreground being the
// pixels of a foreground colour; per frame, its dominant colour and centroid; the soundtrack's
// level and its strongest frequency (the tone that names the shape). Plain C++
// on the bytes the engine or an element hands over (uint8 RGB frames, interleaved f32 stereo), so that both
// the core and the element tests use it.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace h3test {

struct Rgb {
  int r, g, b;
};
struct Named {
  const char* name;
  Rgb rgb;
  bool background;
};

// train/tiny/data.py COLOURS and BACKGROUNDS, in sRGB 0..255.
inline const std::array<Named, 9>& palette() {
  static const std::array<Named, 9> p{{{"red", {225, 35, 35}, false},
                                       {"green", {40, 190, 60}, false},
                                       {"blue", {45, 85, 235}, false},
                                       {"yellow", {240, 220, 40}, false},
                                       {"purple", {150, 55, 205}, false},
                                       {"orange", {250, 140, 25}, false},
                                       {"black", {8, 8, 8}, true},
                                       {"white", {245, 245, 245}, true},
                                       {"gray", {120, 120, 120}, true}}};
  return p;
}

// The palette entry nearest one RGB pixel (squared distance).
inline size_t nearest_colour(const uint8_t* px) {
  const auto& p = palette();
  size_t best = 0;
  long best_d = -1;
  for (size_t k = 0; k < p.size(); ++k) {
    const long dr = px[0] - p[k].rgb.r, dg = px[1] - p[k].rgb.g, db = px[2] - p[k].rgb.b;
    const long d = dr * dr + dg * dg + db * db;
    if (best_d < 0 || d < best_d) best_d = d, best = k;
  }
  return best;
}

struct FrameLook {
  std::string dominant;    // the most frequent foreground colour ("" when there is no foreground)
  int64_t foreground = 0;  // pixels of any foreground colour
  double cx = 0, cy = 0;   // centroid of the dominant colour's pixels
};

// One uint8 RGB frame [h, w, 3] against the palette, with `background` the prompted background.
inline FrameLook look_at(const uint8_t* rgb, int64_t w, int64_t h, const std::string& background) {
  const auto& p = palette();
  std::array<int64_t, 9> count{};
  std::array<double, 9> sx{}, sy{};
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      const size_t best = nearest_colour(rgb + (y * w + x) * 3);
      if (p[best].background || background == p[best].name) continue;
      ++count[best];
      sx[best] += x + 0.5;
      sy[best] += y + 0.5;
    }
  }
  FrameLook out;
  size_t top = 0;
  for (size_t k = 0; k < p.size(); ++k) {
    out.foreground += count[k];
    if (count[k] > count[top]) top = k;
  }
  if (count[top] > 0) {
    out.dominant = p[top].name;
    out.cx = sx[top] / static_cast<double>(count[top]);
    out.cy = sy[top] / static_cast<double>(count[top]);
  }
  return out;
}

// A whole clip: frames [n, h, w, 3] uint8 contiguous.
struct ClipLook {
  std::vector<FrameLook> frames;
  // The share of frames whose dominant foreground colour is `colour` with at least `min_pixels`
  // foreground pixels.
  double colour_share(const std::string& colour, int64_t min_pixels = 120) const {
    int64_t hit = 0;
    for (const auto& f : frames) hit += (f.dominant == colour && f.foreground >= min_pixels) ? 1 : 0;
    return frames.empty() ? 0.0 : static_cast<double>(hit) / static_cast<double>(frames.size());
  }
  // Centroid displacement from the first `k` frames' mean to the last `k` frames' (pixels, y down).
  std::pair<double, double> motion(int64_t k = 8) const {
    const int64_t n = static_cast<int64_t>(frames.size());
    double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
    for (int64_t i = 0; i < k && i < n; ++i) {
      x0 += frames[i].cx / k, y0 += frames[i].cy / k;
      x1 += frames[n - 1 - i].cx / k, y1 += frames[n - 1 - i].cy / k;
    }
    return {x1 - x0, y1 - y0};
  }
};

inline ClipLook look_at_clip(const uint8_t* rgb, int64_t n, int64_t w, int64_t h,
                             const std::string& background) {
  ClipLook c;
  for (int64_t i = 0; i < n; ++i) c.frames.push_back(look_at(rgb + i * w * h * 3, w, h, background));
  return c;
}

struct SoundLook {
  double rms = 0;      // of both channels together, full scale = 1
  double peak = 0;     // largest |sample|
  double peak_hz = 0;  // the strongest frequency of the channels' sum, 50 .. 4000 Hz in 5-Hz steps
};

// Interleaved stereo f32 samples [n, 2] at `rate`. The spectrum is Goertzel's power of the mono
// sum over the first second (or all of it when shorter), on a 5-Hz grid.
inline SoundLook listen_to(const float* lr, int64_t n, double rate) {
  SoundLook s;
  double sum2 = 0;
  for (int64_t i = 0; i < 2 * n; ++i) {
    sum2 += static_cast<double>(lr[i]) * lr[i];
    s.peak = std::max(s.peak, std::abs(static_cast<double>(lr[i])));
  }
  s.rms = n > 0 ? std::sqrt(sum2 / static_cast<double>(2 * n)) : 0.0;
  const int64_t m = std::min<int64_t>(n, static_cast<int64_t>(rate));
  double best = -1;
  for (double f = 50; f <= 4000; f += 5) {
    const double c = 2 * std::cos(2 * M_PI * f / rate);
    double s1 = 0, s2 = 0;
    for (int64_t i = 0; i < m; ++i) {
      const double s0 = lr[2 * i] + lr[2 * i + 1] + c * s1 - s2;
      s2 = s1, s1 = s0;
    }
    const double power = s1 * s1 + s2 * s2 - c * s1 * s2;
    if (power > best) best = power, s.peak_hz = f;
  }
  return s;
}

}  // namespace h3test
