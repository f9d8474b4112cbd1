// A bounded queue of the soundtrack's stretches between the engine (producer) and h3src's
// audio pad task (consumer), the audio counterpart of FrameQueue with the same wake-ups
// (set_flushing, abort) and ends (finish, fail). Knows nothing of GStreamer.
//
// Bounded in stretches: push() blocks while `max_chunks` stretches are waiting (the one being
// consumed counts until its last sample is popped). pop() hands out at most `max_samples`
// sample frames at a time, so that downstream gets buffers of a usual audio size whatever the
// chunk length.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include "boundary/audio_chunk.h"
#include "boundary/failure.h"

namespace h3src {

using h3gst::AudioChunk;

// Consecutive sample frames handed to the consumer; `keep` holds the samples alive.
struct AudioSlice {
  int64_t first_sample = 0;  // index in the soundtrack
  int64_t count = 0;         // sample frames
  int channels = 2;
  const float* data = nullptr;  // count * channels interleaved floats
  std::shared_ptr<const float> keep;
};

class AudioQueue {
 public:
  enum class PopResult { kSamples, kFlushing, kEnd, kError };

  explicit AudioQueue(size_t max_chunks);
  AudioQueue(const AudioQueue&) = delete;
  AudioQueue& operator=(const AudioQueue&) = delete;

  // Takes effect for the next push. max_chunks >= 1.
  void set_max_chunks(size_t max_chunks);

  // Producer. Blocks while the queue is full. Returns false (and drops the stretch) once
  // abort() was called, or after finish()/fail().
  bool push(AudioChunk chunk);
  void finish();
  void fail(const h3gst::Failure& failure);

  // Consumer. Blocks while there is nothing to return; at most `max_samples` (>= 1).
  PopResult pop(AudioSlice* slice, int64_t max_samples, h3gst::Failure* failure = nullptr);

  void set_flushing(bool flushing);
  void abort();
  void reset();

  size_t queued_chunks() const;
  size_t high_water_chunks() const;

 private:
  bool closed_locked() const { return aborted_ || finished_ || failed_; }

  mutable std::mutex mutex_;
  std::condition_variable not_full_, not_empty_;
  std::deque<AudioChunk> chunks_;
  int64_t next_in_front_ = 0;  // sample frames of chunks_.front() already popped
  size_t max_chunks_;
  size_t high_water_ = 0;
  bool flushing_ = false, aborted_ = false, finished_ = false, failed_ = false;
  h3gst::Failure failure_;
};

}  // namespace h3src
