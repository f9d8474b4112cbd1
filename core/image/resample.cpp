#include "image/resample.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "h3/error.h"

namespace h3::image {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // Pillow's fixed point for 8-bit images
constexpr double kLanczosSupport = 3.0;
constexpr double kPi = 3.14159265358979323846;

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= kPi;
  return std::sin(x) / x;
}

double lanczos(double x) {
  return (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3.0) : 0.0;
}

// One axis: for each output index the first source index, how many it reads, and their
// fixed-point weights (`taps` per output, unused ones 0).
struct Taps {
  int64_t taps = 0;
  std::vector<int64_t> first, count;
  std::vector<int32_t> weights;
};

Taps axis_taps(int64_t in_size, int64_t out_size) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filter_scale = std::max(scale, 1.0);
  const double support = kLanczosSupport * filter_scale;
  const double inverse_scale = 1.0 / filter_scale;  // multiplied, as Pillow does (not divided)
  Taps t;
  t.taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(out_size);
  t.count.resize(out_size);
  t.weights.assign(static_cast<size_t>(out_size * t.taps), 0);
  std::vector<double> k(static_cast<size_t>(t.taps));
  for (int64_t o = 0; o < out_size; ++o) {
    const double center = (static_cast<double>(o) + 0.5) * scale;
    // Pillow truncates (int) after adding 0.5; both sides are clamped to the source.
    int64_t lo = static_cast<int64_t>(center - support + 0.5);
    if (lo < 0) lo = 0;
    int64_t hi = static_cast<int64_t>(center + support + 0.5);
    if (hi > in_size) hi = in_size;
    const int64_t n = hi - lo;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      k[i] = lanczos((static_cast<double>(i + lo) - center + 0.5) * inverse_scale);
      sum += k[i];
    }
    for (int64_t i = 0; i < n; ++i) {
      const double w = sum != 0.0 ? k[i] / sum : k[i];
      // Rounded away from zero, as Pillow's normalize_coeffs_8bpc.
      t.weights[o * t.taps + i] =
          static_cast<int32_t>(w < 0 ? -0.5 + w * (1 << kPrecisionBits) : 0.5 + w * (1 << kPrecisionBits));
    }
    t.first[o] = lo;
    t.count[o] = n;
  }
  return t;
}

uint8_t clip8(int64_t v) {
  if (v <= 0) return 0;
  v >>= kPrecisionBits;
  return static_cast<uint8_t>(v > 255 ? 255 : v);
}

// Rows [row0, row0 + rows) of `in`, resized horizontally to t's output width.
Rgb8 horizontal(const Rgb8& in, const Taps& t, int64_t width, int64_t row0, int64_t rows) {
  Rgb8 out{width, rows, std::vector<uint8_t>(static_cast<size_t>(width * rows * 3))};
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* src = in.rgb.data() + (row0 + y) * in.width * 3;
    uint8_t* dst = out.rgb.data() + y * width * 3;
    for (int64_t x = 0; x < width; ++x) {
      const int32_t* w = t.weights.data() + x * t.taps;
      const uint8_t* s = src + t.first[x] * 3;
      for (int c = 0; c < 3; ++c) {
        int64_t acc = int64_t(1) << (kPrecisionBits - 1);
        for (int64_t i = 0; i < t.count[x]; ++i) acc += int64_t(s[i * 3 + c]) * w[i];
        dst[x * 3 + c] = clip8(acc);
      }
    }
  }
  return out;
}

// `in` resized vertically to t's output height; t's first rows are relative to `row0`.
Rgb8 vertical(const Rgb8& in, const Taps& t, int64_t height, int64_t row0) {
  Rgb8 out{in.width, height, std::vector<uint8_t>(static_cast<size_t>(in.width * height * 3))};
  const int64_t stride = in.width * 3;
  for (int64_t y = 0; y < height; ++y) {
    const int32_t* w = t.weights.data() + y * t.taps;
    const uint8_t* s = in.rgb.data() + (t.first[y] - row0) * stride;
    uint8_t* dst = out.rgb.data() + y * stride;
    for (int64_t x = 0; x < stride; ++x) {
      int64_t acc = int64_t(1) << (kPrecisionBits - 1);
      for (int64_t i = 0; i < t.count[y]; ++i) acc += int64_t(s[i * stride + x]) * w[i];
      dst[x] = clip8(acc);
    }
  }
  return out;
}

void check_picture(const Rgb8& p, const char* what) {
  if (p.width < 1 || p.height < 1 || p.rgb.size() != static_cast<size_t>(p.width * p.height * 3)) {
    throw Error(ErrorKind::kInvalidArgument, std::string(what) + ": not a width x height x 3 picture");
  }
}

Rgb8 transposed(const Rgb8& in) {
  Rgb8 t{in.height, in.width, std::vector<uint8_t>(in.rgb.size())};
  for (int64_t y = 0; y < in.height; ++y)
    for (int64_t x = 0; x < in.width; ++x)
      for (int c = 0; c < 3; ++c) t.rgb[(x * in.height + y) * 3 + c] = in.rgb[(y * in.width + x) * 3 + c];
  return t;
}

// The horizontal pass first (over only the rows the vertical pass reads), then the vertical.
Rgb8 resize_horizontal_first(const Rgb8& in, int64_t width, int64_t height) {
  const Taps tv = axis_taps(in.height, height);
  // Only the source rows the vertical pass reads are resized horizontally.
  const int64_t row0 = tv.first.front();
  const int64_t row_end = tv.first.back() + tv.count.back();
  Rgb8 h = in;
  int64_t h_row0 = 0;
  if (width != in.width) {
    h = horizontal(in, axis_taps(in.width, width), width, row0, row_end - row0);
    h_row0 = row0;
  }
  if (height == in.height) return h;
  return vertical(h, tv, height, h_row0);
}

}  // namespace

Rgb8 resize_lanczos(const Rgb8& in, int64_t width, int64_t height) {
  check_picture(in, "resize_lanczos");
  if (width < 1 || height < 1)
    throw Error(ErrorKind::kInvalidArgument, "resize_lanczos: an empty target size");
  if (width == in.width && height == in.height) return in;
  // Pillow 13 (python-pillow/Pillow#9549) runs the vertical pass first when the height loses more
  // than twice as many pixels as the width; the passes round in between, so the order shows. That
  // order is the horizontal-first resize of the transposed picture.
  if (width != in.width && height < in.height && (in.height - height) > 2 * (in.width - width)) {
    return transposed(resize_horizontal_first(transposed(in), height, width));
  }
  return resize_horizontal_first(in, width, height);
}

Rgb8 crop(const Rgb8& in, int64_t left, int64_t top, int64_t width, int64_t height) {
  check_picture(in, "crop");
  if (left < 0 || top < 0 || width < 1 || height < 1 || left + width > in.width || top + height > in.height) {
    throw Error(ErrorKind::kInvalidArgument, "crop: the rectangle is not inside the picture");
  }
  Rgb8 out{width, height, std::vector<uint8_t>(static_cast<size_t>(width * height * 3))};
  for (int64_t y = 0; y < height; ++y) {
    std::copy_n(in.rgb.data() + ((top + y) * in.width + left) * 3, width * 3, out.rgb.data() + y * width * 3);
  }
  return out;
}

}  // namespace h3::image
