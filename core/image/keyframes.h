// FL2VA keyframes onto the canvas, as the reference pipelines put them (diffusers' MiniMax-H3
// resize step): the canvas follows the first keyframe's aspect ratio unless the request names
// one; the first keyframe (the geometry anchor) is stretched onto it, a follower is scaled to
// cover it and centre-cropped; both with Pillow's Lanczos (image/resample.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "image/resample.h"

namespace h3::image {

// The aspect ratios the released model was trained over (width / height).
constexpr double kMinAspect = 1.0 / 4.0, kMaxAspect = 4.0;

// The canvas (height, width) for a picture of aspect_width x aspect_height: the short edge at
// `short_edge`, the area capped at `max_pixels`, each side rounded (halves to even) to a multiple
// of `multiple` and at least one multiple. Throws h3::Error(kInvalidArgument) naming `what` for an
// aspect ratio outside [1/4, 4].
std::array<int64_t, 2> resolve_canvas(int64_t aspect_width, int64_t aspect_height, int64_t multiple,
                                      int64_t short_edge, int64_t max_pixels, const std::string& what);

// The anchor (the first keyframe given): stretched onto width x height.
Rgb8 stretch_onto(const Rgb8& picture, int64_t width, int64_t height);
// A follower: scaled (rounded, halves to even) so that it covers width x height, then the centre
// crop of that size (left = (scaled width - width) / 2, floored; top likewise).
Rgb8 cover_onto(const Rgb8& picture, int64_t width, int64_t height);
// A request's keyframes in packed order onto a width x height canvas: the first stretched, the
// others covered (what the engine and `h3 encode-prompt` both show the model).
std::vector<Rgb8> onto_canvas(const std::vector<Rgb8>& keyframes, int64_t width, int64_t height);

}  // namespace h3::image
