// A bounded queue (ChunkQueue) of decoded chunks between the engine (producer) and
// h3videosrc's fill() or h3src's video pad task (consumer). It knows nothing of GStreamer so that it can be
// unit-tested on its own.
//
// Bounded in chunks: push() blocks while `max_chunks` chunks are waiting (the
// chunk being consumed counts until its last frame is popped), which stalls the
// engine's rank 0 in its ChunkSink and so bounds the frames in flight whatever
// downstream does. pop() hands out one frame at a time.
//
// Two different wake-ups, because GstBaseSrc needs both:
//  - set_flushing(true) (unlock): pop() returns kFlushing at once and keeps doing
//    so until set_flushing(false); queued frames are kept and the producer keeps
//    waiting. Used around flushes and state changes that may resume.
//  - abort() (the request is being cancelled): drops every frame, wakes both
//    sides; push() returns false from then on until reset().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "boundary/engine_failure.h"
#include "chunk_queue.h"
#include "h3/frame_chunk.h"

namespace h3gst {

using h3::FrameChunk;

// One frame handed to the consumer; `keep` holds the chunk's pixels alive.
struct Frame {
  int64_t index = -1;  // index in the clip
  int64_t width = 0, height = 0;
  const uint8_t* data = nullptr;  // width * height * 3 bytes, packed RGB
  bool chunk_start = false;       // the first frame of its chunk
  std::shared_ptr<const uint8_t> keep;
};

class FrameQueue : public ChunkQueue<FrameChunk> {
 public:
  enum class PopResult { kFrame, kFlushing, kEnd, kError };

  explicit FrameQueue(size_t max_chunks) : ChunkQueue(max_chunks) {}

  // Consumer. Blocks while there is nothing to return. On kError, `failure`
  // (when not null) receives what fail() was given.
  PopResult pop(Frame* frame, h3gst::EngineFailure* failure = nullptr);

  int64_t queued_frames() const { return queued_units(); }
};

}  // namespace h3gst
