// One decoded chunk as the engine hands it to a torch-free consumer (the GStreamer plugin through
// the engine module, an application through h3::Generator): packed RGB frames whose
// pixels stay alive as long as anyone holds `pixels` (the engine's tensor stays behind it, so no
// frame is copied on the way: core/api/callback_sink.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "h3/audio_chunk.h"

namespace h3 {

// `count` RGB frames of width x height, packed (stride width*3).
struct FrameChunk {
  int64_t index = 0;        // chunk index in the clip
  int64_t first_frame = 0;  // index of its first frame in the clip
  int64_t count = 0;        // frames in this chunk
  int64_t width = 0, height = 0;
  std::shared_ptr<const uint8_t> pixels;  // count * height * width * 3 bytes
  // The engine's decode time of these frames (h3::Chunk::decode_ns): a live element's latency.
  int64_t decode_ns = 0;
  // With audio, chunk `index`'s soundtrack stretch follows its frames as a FrameChunk of the
  // same index with count 0 and only `audio` (count 0 in every other chunk).
  AudioChunk audio;

  size_t frame_bytes() const { return static_cast<size_t>(width * height * 3); }
};

}  // namespace h3
