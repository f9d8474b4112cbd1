// The soundtrack's stretch that goes with one decoded video chunk (FrameChunk::audio), as the
// engine hands it to a torch-free consumer: interleaved stereo f32 samples that stay alive as long
// as anyone holds `samples` (the engine's tensor stays behind it, no copy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace h3 {

struct AudioChunk {
  int64_t first_sample = 0;              // index of its first sample frame in the clip's soundtrack
  int64_t count = 0;                     // sample frames (each `channels` floats); 0: no audio was asked for
  int channels = 2;                      // interleaved, left first
  int rate = 0;                          // samples per second per channel: ClipPlan::audio_rate
  std::shared_ptr<const float> samples;  // count * channels floats in [-1, 1]

  size_t bytes() const { return static_cast<size_t>(count * channels) * sizeof(float); }
};

}  // namespace h3
