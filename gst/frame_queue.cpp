#include "frame_queue.h"

#include <algorithm>
#include <utility>

namespace h3src {

FrameQueue::FrameQueue(size_t max_chunks) : max_chunks_(std::max<size_t>(1, max_chunks)) {}

void FrameQueue::set_max_chunks(size_t max_chunks) {
  std::lock_guard<std::mutex> lock(mutex_);
  max_chunks_ = std::max<size_t>(1, max_chunks);
  not_full_.notify_all();
}

size_t FrameQueue::max_chunks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return max_chunks_;
}

bool FrameQueue::push(FrameChunk chunk) {
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

void FrameQueue::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_locked()) return;
  finished_ = true;
  not_empty_.notify_all();
  not_full_.notify_all();
}

void FrameQueue::fail(const h3gst::Failure& failure) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_ || finished_ || failed_) return;
  failed_ = true;
  failure_ = failure;
  not_empty_.notify_all();
  not_full_.notify_all();
}

FrameQueue::PopResult FrameQueue::pop(Frame* frame, h3gst::Failure* failure) {
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
  FrameChunk& c = chunks_.front();
  const int64_t i = next_in_front_;
  frame->index = c.first_frame + i;
  frame->width = c.width;
  frame->height = c.height;
  frame->data = c.pixels.get() + static_cast<size_t>(i) * c.frame_bytes();
  frame->chunk_start = i == 0;
  frame->keep = c.pixels;
  if (++next_in_front_ == c.count) {
    chunks_.pop_front();
    next_in_front_ = 0;
    not_full_.notify_all();
  }
  return PopResult::kFrame;
}

void FrameQueue::set_flushing(bool flushing) {
  std::lock_guard<std::mutex> lock(mutex_);
  flushing_ = flushing;
  not_empty_.notify_all();
}

void FrameQueue::abort() {
  std::lock_guard<std::mutex> lock(mutex_);
  aborted_ = true;
  chunks_.clear();
  next_in_front_ = 0;
  not_empty_.notify_all();
  not_full_.notify_all();
}

void FrameQueue::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  chunks_.clear();
  next_in_front_ = 0;
  high_water_ = 0;
  aborted_ = finished_ = failed_ = false;
  failure_ = h3gst::Failure();
}

size_t FrameQueue::queued_chunks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return chunks_.size();
}

int64_t FrameQueue::queued_frames() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t n = 0;
  for (const auto& c : chunks_) n += c.count;
  return n - next_in_front_;
}

size_t FrameQueue::high_water_chunks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return high_water_;
}

}  // namespace h3src
