// A bounded queue of the soundtrack's stretches between the engine (producer) and h3src's
// audio pad task (consumer): a ChunkQueue (the bound, the ends and the wake-ups) of stretches.
// Bounded in stretches: push() blocks while `max_chunks` stretches are waiting (the one being
// consumed counts until its last sample is popped). pop() hands out at most `max_samples`
// sample frames at a time, so that downstream gets buffers of a usual audio size whatever the
// chunk length.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "boundary/engine_failure.h"
#include "chunk_queue.h"
#include "h3/audio_chunk.h"

namespace h3gst {

using h3::AudioChunk;

// Consecutive sample frames handed to the consumer; `keep` holds the samples alive.
struct AudioSlice {
  int64_t first_sample = 0;  // index in the soundtrack
  int64_t count = 0;         // sample frames
  int channels = 2;
  const float* data = nullptr;  // count * channels interleaved floats
  std::shared_ptr<const float> keep;
};

class AudioQueue : public ChunkQueue<AudioChunk> {
 public:
  enum class PopResult { kSamples, kFlushing, kEnd, kError };

  explicit AudioQueue(size_t max_chunks) : ChunkQueue(max_chunks) {}

  // Consumer. Blocks while there is nothing to return; at most `max_samples` (>= 1), never
  // across two stretches. On kError, `failure` (when not null) receives what fail() was given.
  PopResult pop(AudioSlice* slice, int64_t max_samples, h3gst::EngineFailure* failure = nullptr);
};

}  // namespace h3gst
