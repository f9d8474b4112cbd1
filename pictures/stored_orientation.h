// The EXIF orientation a PNG or WebP file stores. The reference pipelines' load_image turns every
// picture upright by its EXIF orientation (Pillow's exif_transpose, which reads a PNG's eXIf chunk
// and a WebP's EXIF chunk as well as a JPEG's APP1). GStreamer's jpegparse reports a JPEG's
// orientation as a tag, but pngdec and webpdec report none, so for those two the EXIF block is found
// here by walking the file's chunks and read by GStreamer's own EXIF parser.
#pragma once

#include <gst/video/video.h>

#include <optional>
#include <string>

namespace h3::pictures {

// The orientation stored in the PNG or WebP file at `path` (a local file name), as the method that
// turns the stored picture upright; nothing for another format, for no EXIF block, for an
// orientation of 1 (upright) or for a block GStreamer cannot parse. Reads chunk headers and the
// EXIF block only (at most 1 MiB of it); never throws.
std::optional<GstVideoOrientationMethod> stored_orientation(const std::string& path);

}  // namespace h3::pictures
