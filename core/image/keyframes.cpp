#include "image/keyframes.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "h3/error.h"

namespace h3::image {
namespace {

int64_t round_even(double v) {
  return static_cast<int64_t>(std::nearbyint(v));
}

}  // namespace

std::array<int64_t, 2> resolve_canvas(int64_t aspect_width, int64_t aspect_height, int64_t multiple,
                                      int64_t short_edge, int64_t max_pixels, const std::string& what) {
  if (aspect_width <= 0 || aspect_height <= 0) {
    throw Error(ErrorKind::kInvalidArgument, what + ": an empty picture has no aspect ratio");
  }
  const double ratio = static_cast<double>(aspect_width) / static_cast<double>(aspect_height);
  if (ratio < kMinAspect || ratio > kMaxAspect) {
    std::ostringstream m;
    m << what << ": " << aspect_width << "x" << aspect_height << " (aspect ratio " << ratio
      << ") is outside the 1:4 to 4:1 the model was trained for: crop it, or give width and height";
    throw Error(ErrorKind::kInvalidArgument, m.str());
  }
  double w = 0, h = 0;
  if (ratio >= 1.0) {
    w = static_cast<double>(short_edge) * ratio;
    h = static_cast<double>(short_edge);
  } else {
    w = static_cast<double>(short_edge);
    h = static_cast<double>(short_edge) / ratio;
  }
  const double area = w * h;
  if (area > static_cast<double>(max_pixels)) {
    const double s = std::sqrt(static_cast<double>(max_pixels) / area);
    w *= s;
    h *= s;
  }
  const double m = static_cast<double>(multiple);
  return {std::max(multiple, round_even(h / m) * multiple), std::max(multiple, round_even(w / m) * multiple)};
}

Rgb8 stretch_onto(const Rgb8& picture, int64_t width, int64_t height) {
  return resize_lanczos(picture, width, height);
}

std::vector<Rgb8> onto_canvas(const std::vector<Rgb8>& keyframes, int64_t width, int64_t height) {
  std::vector<Rgb8> out;
  for (size_t i = 0; i < keyframes.size(); ++i) {
    out.push_back(i == 0 ? stretch_onto(keyframes[i], width, height)
                         : cover_onto(keyframes[i], width, height));
  }
  return out;
}

Rgb8 cover_onto(const Rgb8& picture, int64_t width, int64_t height) {
  if (picture.width == width && picture.height == height) return picture;
  const double scale = std::max(static_cast<double>(width) / static_cast<double>(picture.width),
                                static_cast<double>(height) / static_cast<double>(picture.height));
  const int64_t sw = std::max(width, round_even(static_cast<double>(picture.width) * scale));
  const int64_t sh = std::max(height, round_even(static_cast<double>(picture.height) * scale));
  const Rgb8 scaled = resize_lanczos(picture, sw, sh);
  return crop(scaled, std::max<int64_t>(0, (sw - width) / 2), std::max<int64_t>(0, (sh - height) / 2), width,
              height);
}

}  // namespace h3::image
