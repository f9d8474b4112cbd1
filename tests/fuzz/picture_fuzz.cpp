// libFuzzer target for the picture reader (pictures/picture_file.h): the input is a file handed
// over as a keyframe or a Ref2VA reference. read_picture and read_reference must return what
// their limits allow (each side 16 to 16384 pixels, at most 8192 x 8192 in all, RGB of the
// announced size; sound of 1 or 2 channels) or refuse with an h3::Error. Anything else (a crash, a
// sanitizer report, another exception, a hang past libFuzzer's timeout) is a bug.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "h3/error.h"
#include "h3/limits.h"
#include "pictures/picture_file.h"

namespace {

bool sound_ok(const h3::Audio& a) {
  return a.empty() ||
         (a.rate > 0 && (a.channels == 1 || a.channels == 2) && a.samples.size() % a.channels == 0);
}

bool picture_ok(int64_t w, int64_t h, size_t bytes) {
  return w >= h3::kMinPictureSide && h >= h3::kMinPictureSide && w * h <= h3::kMaxPicturePixels &&
         bytes == static_cast<size_t>(w * h * 3);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("h3-picture-fuzz-" + std::to_string(::getpid()))).string();
  if (size == 0) return 0;
  // The first byte picks the reader: a keyframe or a reference.
  const bool reference = data[0] & 1;
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data) + 1, static_cast<std::streamsize>(size - 1));
  try {
    if (!reference) {
      const h3::Picture p = h3::pictures::read_picture(path, "first-frame", 10.0);
      if (!picture_ok(p.width, p.height, p.rgb.size())) std::abort();
    } else {
      const h3::Reference r = h3::pictures::read_reference(path, "reference 1", 2.0, 10.0);
      if (!r.image.empty() && !picture_ok(r.image.width, r.image.height, r.image.rgb.size())) std::abort();
      for (const auto& f : r.video.frames) {
        if (!picture_ok(r.video.width, r.video.height, f.size())) std::abort();
      }
      if (!r.video.empty() && (r.video.fps_n <= 0 || r.video.fps_d <= 0)) std::abort();
      if (!sound_ok(r.audio) || !sound_ok(r.video.soundtrack)) std::abort();
    }
  } catch (const h3::Error&) {
  }
  return 0;
}
