// Pictures for FL2VA keyframes and Ref2VA references, decoded by GStreamer itself: a file or any
// URI it can read, in any format it has a decoder for (PNG, JPEG, WebP, ..., a video, a sound), to
// 8-bit RGB and float samples. Shared by the elements' first-frame / last-frame / references properties and
// `h3 generate
// --first-frame / --last-frame / --reference`. Torch-free; the engine resizes the pictures itself.
#pragma once

#include <string>

#include "h3/request.h"

namespace h3::pictures {

// The first picture of `location` (a path or a URI). A picture with a side under kMinPictureSide
// or over 16384 pixels, or over kMaxPicturePixels in all (h3/limits.h), is refused as soon as
// its size is known: from its header where a parser or demuxer reads it (PNG, JPEG, containers),
// before any decoder exists; else from its decoder's output. Throws h3::Error naming `what` (the
// property or flag) and the location: kNotFound (no such file), kInvalidArgument (empty,
// unreadable, damaged, not something GStreamer can decode, no picture in it within `timeout_s`,
// too small or too large, naming the size and the limits).
Picture read_picture(const std::string& location, const std::string& what, double timeout_s = 60.0);

// A Ref2VA reference: an image; or (when GStreamer decodes more than one frame from it) a video,
// its frames until `max_seconds` (the clip's duration: later ones are never read) at the rate its
// caps announce (else the average of its timestamps), with its soundtrack when it has one; or, for
// a file of sound alone, an audio reference. Sound is decoded at its own rate to interleaved float,
// mono or stereo (more channels are mixed down to stereo), until `max_seconds`. The same limits
// and errors as read_picture per frame; also kInvalidArgument for frames that change size, for
// more than kMaxReferenceVideoBytes of frames, for sound GStreamer cannot decode, and for a video
// or sound that ends more than a tenth before the duration its container states (a truncated
// file). A file whose demuxer or decoder fails is refused with what it said, not read again for
// its sound.
Reference read_reference(const std::string& location, const std::string& what, double max_seconds,
                         double timeout_s = 60.0);

}  // namespace h3::pictures
