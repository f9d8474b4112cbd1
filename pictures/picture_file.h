// Pictures for FL2VA keyframes, decoded by GStreamer itself: a file or any URI it can read, in any
// format it has a decoder for (PNG, JPEG, WebP, ..., or a video, whose first frame is taken), to
// 8-bit RGB. Shared by the elements' first-frame / last-frame properties and `h3 generate
// --first-frame / --last-frame`. Torch-free; the engine puts the picture onto the canvas itself.
#pragma once

#include <string>

#include "engine/request.h"

namespace h3::pictures {

// The first picture of `location` (a path or a URI). Before anything is allocated for the pixels,
// a picture with a side under kMinPictureSide or over 16384 pixels is refused, and after decoding
// one over kMaxPicturePixels (engine/limits.h). Throws h3::Error naming `what` (the property or
// flag) and the location: kNotFound (no such file), kInvalidArgument (unreadable, not something
// GStreamer can decode, no picture in it within `timeout_s`, too small or too large).
Picture read_picture(const std::string& location, const std::string& what, double timeout_s = 60.0);

}  // namespace h3::pictures
