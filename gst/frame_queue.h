// A bounded queue of decoded chunks between the engine (producer) and the
// element's create() (consumer). It knows nothing of GStreamer so that it can be
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

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include "boundary/failure.h"
#include "boundary/frame_chunk.h"

namespace h3src {

using h3gst::FrameChunk;

// One frame handed to the consumer; `keep` holds the chunk's pixels alive.
struct Frame {
  int64_t index = -1;  // index in the clip
  int64_t width = 0, height = 0;
  const uint8_t* data = nullptr;  // width * height * 3 bytes, packed RGB
  bool chunk_start = false;       // the first frame of its chunk
  std::shared_ptr<const uint8_t> keep;
};

class FrameQueue {
 public:
  enum class PopResult { kFrame, kFlushing, kEnd, kError };

  explicit FrameQueue(size_t max_chunks);
  FrameQueue(const FrameQueue&) = delete;
  FrameQueue& operator=(const FrameQueue&) = delete;

  // Changes the bound; takes effect for the next push. max_chunks >= 1.
  void set_max_chunks(size_t max_chunks);
  size_t max_chunks() const;

  // Producer. Blocks while the queue is full. Returns false (and drops the
  // chunk) once abort() was called, or after finish()/fail().
  bool push(FrameChunk chunk);
  // End of stream after the queued frames.
  void finish();
  // An error after the queued frames.
  void fail(const h3gst::Failure& failure);

  // Consumer. Blocks while there is nothing to return. On kError, `failure`
  // (when not null) receives what fail() was given.
  PopResult pop(Frame* frame, h3gst::Failure* failure = nullptr);

  // unlock / unlock_stop: see the file comment.
  void set_flushing(bool flushing);
  // Cancels: drops every chunk and wakes both sides.
  void abort();
  // Empty and open again for a new request (flushing is left as it is).
  void reset();

  size_t queued_chunks() const;
  int64_t queued_frames() const;
  // The largest number of chunks that were ever waiting at once since reset().
  size_t high_water_chunks() const;

 private:
  bool closed_locked() const { return aborted_ || finished_ || failed_; }

  mutable std::mutex mutex_;
  std::condition_variable not_full_, not_empty_;
  std::deque<FrameChunk> chunks_;
  int64_t next_in_front_ = 0;  // frames of chunks_.front() already popped
  size_t max_chunks_;
  size_t high_water_ = 0;
  bool flushing_ = false, aborted_ = false, finished_ = false, failed_ = false;
  h3gst::Failure failure_;
};

}  // namespace h3src
