#include "audio_queue.h"

#include <algorithm>
#include <utility>

namespace h3src {

AudioQueue::AudioQueue(size_t max_chunks) : max_chunks_(std::max<size_t>(1, max_chunks)) {}

void AudioQueue::set_max_chunks(size_t max_chunks) {
  std::lock_guard<std::mutex> lock(mutex_);
  max_chunks_ = std::max<size_t>(1, max_chunks);
  not_full_.notify_all();
}

bool AudioQueue::push(AudioChunk chunk) {
  std::unique_lock<std::mutex> lock(mutex_);
  not_full_.wait(lock, [&] { return closed_locked() || chunks_.size() < max_chunks_; });
  if (closed_locked()) return false;
  if (chunk.count > 0) {
    chunks_.push_back(std::move(chunk));
    high_water_ = std::max(high_water_, chunks_.size());
    not_empty_.notify_all();
  }
  return true;
}

void AudioQueue::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_locked()) return;
  finished_ = true;
  not_empty_.notify_all();
  not_full_.notify_all();
}

void AudioQueue::fail(const h3gst::Failure& failure) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_locked()) return;
  failed_ = true;
  failure_ = failure;
  not_empty_.notify_all();
  not_full_.notify_all();
}

AudioQueue::PopResult AudioQueue::pop(AudioSlice* slice, int64_t max_samples, h3gst::Failure* failure) {
  std::unique_lock<std::mutex> lock(mutex_);
  not_empty_.wait(lock, [&] { return flushing_ || aborted_ || !chunks_.empty() || finished_ || failed_; });
  if (flushing_ || aborted_) return PopResult::kFlushing;
  if (chunks_.empty()) {
    if (failed_) {
      if (failure) *failure = failure_;
      return PopResult::kError;
    }
    return PopResult::kEnd;
  }
  const AudioChunk& c = chunks_.front();
  const int64_t i = next_in_front_;
  slice->first_sample = c.first_sample + i;
  slice->count = std::min(std::max<int64_t>(1, max_samples), c.count - i);
  slice->channels = c.channels;
  slice->data = c.samples.get() + static_cast<size_t>(i * c.channels);
  slice->keep = c.samples;
  next_in_front_ += slice->count;
  if (next_in_front_ == c.count) {
    chunks_.pop_front();
    next_in_front_ = 0;
    not_full_.notify_all();
  }
  return PopResult::kSamples;
}

void AudioQueue::set_flushing(bool flushing) {
  std::lock_guard<std::mutex> lock(mutex_);
  flushing_ = flushing;
  not_empty_.notify_all();
}

void AudioQueue::abort() {
  std::lock_guard<std::mutex> lock(mutex_);
  aborted_ = true;
  chunks_.clear();
  next_in_front_ = 0;
  not_empty_.notify_all();
  not_full_.notify_all();
}

void AudioQueue::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  chunks_.clear();
  next_in_front_ = 0;
  high_water_ = 0;
  aborted_ = finished_ = failed_ = false;
  failure_ = h3gst::Failure();
}

size_t AudioQueue::queued_chunks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return chunks_.size();
}

size_t AudioQueue::high_water_chunks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return high_water_;
}

}  // namespace h3src
