#include "pictures/stored_orientation.h"

#include <gst/tag/tag.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace h3::pictures {
namespace {

// An EXIF block larger than this is not read (a JPEG's APP1 holds at most 64 KiB).
constexpr uint32_t kMaxExifBytes = 1u << 20;
// Chunks walked before giving up on a file (a picture has a handful).
constexpr int kMaxChunks = 100000;

struct FileClose {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileClose>;

uint32_t big_endian(const uint8_t* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}
uint32_t little_endian(const uint8_t* b) {
  return (uint32_t{b[3]} << 24) | (uint32_t{b[2]} << 16) | (uint32_t{b[1]} << 8) | uint32_t{b[0]};
}

bool read_exact(FILE* f, void* out, size_t n) {
  return std::fread(out, 1, n, f) == n;
}

std::vector<uint8_t> read_block(FILE* f, uint32_t n) {
  if (n == 0 || n > kMaxExifBytes) return {};
  std::vector<uint8_t> out(n);
  if (!read_exact(f, out.data(), n)) return {};
  return out;
}

// PNG: the signature, then chunks of a big-endian length, a type, the data and a CRC.
std::vector<uint8_t> png_exif(FILE* f) {
  for (int i = 0; i < kMaxChunks; ++i) {
    uint8_t head[8];
    if (!read_exact(f, head, sizeof head)) return {};
    const uint32_t length = big_endian(head);
    if (std::memcmp(head + 4, "eXIf", 4) == 0) return read_block(f, length);
    if (std::memcmp(head + 4, "IEND", 4) == 0) return {};
    if (std::fseek(f, static_cast<long>(length) + 4, SEEK_CUR) != 0) return {};
  }
  return {};
}

// WebP: RIFF chunks of a four-character code, a little-endian size and the data padded to even.
std::vector<uint8_t> webp_exif(FILE* f) {
  for (int i = 0; i < kMaxChunks; ++i) {
    uint8_t head[8];
    if (!read_exact(f, head, sizeof head)) return {};
    const uint32_t size = little_endian(head + 4);
    if (std::memcmp(head, "EXIF", 4) == 0) return read_block(f, size);
    if (std::fseek(f, static_cast<long>(size) + (size & 1), SEEK_CUR) != 0) return {};
  }
  return {};
}

}  // namespace

std::optional<GstVideoOrientationMethod> stored_orientation(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) return std::nullopt;
  std::array<uint8_t, 12> magic{};
  if (!read_exact(f.get(), magic.data(), magic.size())) return std::nullopt;
  std::vector<uint8_t> exif;
  if (std::memcmp(magic.data(), "\x89PNG\r\n\x1a\n", 8) == 0) {
    std::fseek(f.get(), 8, SEEK_SET);
    exif = png_exif(f.get());
  } else if (std::memcmp(magic.data(), "RIFF", 4) == 0 && std::memcmp(magic.data() + 8, "WEBP", 4) == 0) {
    exif = webp_exif(f.get());
  }
  // Some writers keep the "Exif\0\0" marker of a JPEG's APP1 in front of the TIFF header.
  static const uint8_t kMarker[6] = {'E', 'x', 'i', 'f', 0, 0};
  size_t skip =
      exif.size() > sizeof kMarker && std::memcmp(exif.data(), kMarker, sizeof kMarker) == 0 ? 6 : 0;
  if (exif.size() <= skip) return std::nullopt;
  GstBuffer* buffer = gst_buffer_new_memdup(exif.data() + skip, exif.size() - skip);
  GstTagList* tags = gst_tag_list_from_exif_buffer_with_tiff_header(buffer);
  gst_buffer_unref(buffer);
  if (!tags) return std::nullopt;
  GstVideoOrientationMethod method = GST_VIDEO_ORIENTATION_IDENTITY;
  const bool found = gst_video_orientation_from_tag(tags, &method);
  gst_tag_list_unref(tags);
  if (!found || method == GST_VIDEO_ORIENTATION_IDENTITY) return std::nullopt;
  return method;
}

}  // namespace h3::pictures
