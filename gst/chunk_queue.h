// The bounded queue both element queues are made of (FrameQueue: decoded chunks' frames;
// AudioQueue: the soundtrack's stretches): the producer's bound, the ends (finish, fail) and
// the two wake-ups (set_flushing, abort) that GstBaseSrc and h3src's pad tasks need. What a
// consumer takes from the front chunk at a time is the derived queue's business (take()).
// Knows nothing of GStreamer.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>

#include "boundary/engine_failure.h"

namespace h3gst {

template <typename Chunk>
class ChunkQueue {
 public:
  enum class Taken { kItem, kFlushing, kEnd, kError };

  explicit ChunkQueue(size_t max_chunks) : max_chunks_(std::max<size_t>(1, max_chunks)) {}
  ChunkQueue(const ChunkQueue&) = delete;
  ChunkQueue& operator=(const ChunkQueue&) = delete;

  // Changes the bound; takes effect for the next push. max_chunks >= 1.
  void set_max_chunks(size_t max_chunks) {
    std::lock_guard<std::mutex> lock(mutex_);
    max_chunks_ = std::max<size_t>(1, max_chunks);
    not_full_.notify_all();
  }
  size_t max_chunks() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return max_chunks_;
  }

  // Producer. Blocks while `max_chunks` chunks wait (the one being consumed counts until it is
  // used up). Returns false (and drops the chunk) once abort() was called, or after
  // finish()/fail(). An empty chunk (count 0) is accepted and dropped.
  bool push(Chunk chunk) {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!closed_locked() && chunks_.size() >= max_chunks_) {
      ++blocked_producers_;
      not_full_.wait(lock);
      --blocked_producers_;
    }
    if (closed_locked()) return false;
    if (chunk.count > 0) {
      chunks_.push_back(std::move(chunk));
      high_water_ = std::max(high_water_, chunks_.size());
      not_empty_.notify_all();
    }
    return true;
  }
  // End of stream after the queued chunks.
  void finish() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_locked()) return;
    finished_ = true;
    wake_all();
  }
  // An error after the queued chunks.
  void fail(const h3gst::EngineFailure& failure) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_locked()) return;
    failed_ = true;
    failure_ = failure;
    wake_all();
  }

  // While flushing, the consumer's take returns kFlushing at once; queued chunks are kept and
  // the producer keeps waiting (GstBaseSrc unlock / unlock_stop).
  void set_flushing(bool flushing) {
    std::lock_guard<std::mutex> lock(mutex_);
    flushing_ = flushing;
    not_empty_.notify_all();
  }
  // Cancels: drops every chunk and wakes both sides.
  void abort() {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
    chunks_.clear();
    used_of_front_ = 0;
    wake_all();
  }
  // Empty and open again for a new request (flushing is left as it is).
  void reset() {
    std::lock_guard<std::mutex> lock(mutex_);
    chunks_.clear();
    used_of_front_ = 0;
    high_water_ = 0;
    aborted_ = finished_ = failed_ = false;
    failure_ = h3gst::EngineFailure();
  }

  size_t queued_chunks() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return chunks_.size();
  }
  // The largest number of chunks that were ever waiting at once since reset().
  size_t high_water_chunks() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return high_water_;
  }
  // Threads waiting in push() for room, and in the consumer's take for something to return:
  // the element's tests wait for these instead of sleeping.
  int blocked_producers() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return blocked_producers_;
  }
  int blocked_consumers() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return blocked_consumers_;
  }

 protected:
  // Consumer: blocks while there is nothing to return, then calls take(front, used) under the
  // lock: it takes what it hands out from `front`, `used` of whose units went out before, and
  // returns how many more it used; the chunk is dropped once `front.count` are used.
  template <typename Take>
  Taken take_front(Take take, h3gst::EngineFailure* failure) {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!(flushing_ || aborted_ || !chunks_.empty() || finished_ || failed_)) {
      ++blocked_consumers_;
      not_empty_.wait(lock);
      --blocked_consumers_;
    }
    if (flushing_ || aborted_) return Taken::kFlushing;
    if (chunks_.empty()) {
      if (!failed_) return Taken::kEnd;
      if (failure) *failure = failure_;
      return Taken::kError;
    }
    used_of_front_ += take(chunks_.front(), used_of_front_);
    if (used_of_front_ >= chunks_.front().count) {
      chunks_.pop_front();
      used_of_front_ = 0;
      not_full_.notify_all();
    }
    return Taken::kItem;
  }
  // The units (frames) of the queued chunks not handed out yet.
  int64_t queued_units() const {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t n = 0;
    for (const auto& c : chunks_) n += c.count;
    return n - used_of_front_;
  }

 private:
  bool closed_locked() const { return aborted_ || finished_ || failed_; }
  void wake_all() {
    not_empty_.notify_all();
    not_full_.notify_all();
  }

  mutable std::mutex mutex_;
  std::condition_variable not_full_, not_empty_;
  std::deque<Chunk> chunks_;
  int64_t used_of_front_ = 0;
  size_t max_chunks_;
  size_t high_water_ = 0;
  int blocked_producers_ = 0, blocked_consumers_ = 0;
  bool flushing_ = false, aborted_ = false, finished_ = false, failed_ = false;
  h3gst::EngineFailure failure_;
};

}  // namespace h3gst
