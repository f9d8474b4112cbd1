// Lanczos resampling of 8-bit RGB pictures with Pillow's arithmetic (Image.resize(..., LANCZOS)),
// which is how the reference pipelines put a keyframe onto the canvas: the same pixels in, the
// same pixels out, so the keyframe's latents match theirs (docs/conditioning.md).
//
// Separable, antialiased: for each output pixel a window of 3 x max(1, scale) source pixels either
// side of its centre, weights sinc(x) sinc(x / 3) normalised to 1 and then turned into 22-bit
// fixed point; the horizontal pass first (over only the rows the vertical pass reads) unless the
// height shrinks by more than twice what the width does (Pillow 13's order), each pass rounded
// and clamped to 0..255. The reference is Pillow 13.0 (tests/data/keyframes): Pillow 12 and older
// always resize horizontally first, so their output differs for such pictures.
#pragma once

#include <cstdint>
#include <vector>

namespace h3::image {

// An 8-bit RGB picture: `rgb` holds height rows of width * 3 bytes.
struct Rgb8 {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;
};

// `in` resized to width x height (each >= 1). Identity when the size is unchanged.
Rgb8 resize_lanczos(const Rgb8& in, int64_t width, int64_t height);

// The rectangle [left, left + width) x [top, top + height) of `in` (inside it).
Rgb8 crop(const Rgb8& in, int64_t left, int64_t top, int64_t width, int64_t height);

}  // namespace h3::image
