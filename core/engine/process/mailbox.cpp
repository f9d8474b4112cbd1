#include "engine/process/mailbox.h"

namespace h3::engine_detail {

void Mailbox::post(Event e) {
  {
    std::lock_guard<std::mutex> lk(m_);
    queue_.push_back(std::move(e));
  }
  cv_.notify_all();
}

std::exception_ptr Mailbox::call(Event e) {
  const bool chunk_frames = e.kind == Event::Kind::kChunk && e.chunk.frames.defined();
  std::unique_lock<std::mutex> lk(m_);
  waiting_ = true;
  answered_ = false;
  e.awaits_answer = true;
  queue_.push_back(std::move(e));
  cv_.notify_all();
  if (waiter_) {
    lk.unlock();
    try {
      waiter_->await_answer(chunk_frames);
    } catch (...) {
      // The request is being ended: its caller's answer, when it comes, is not read.
      lk.lock();
      waiting_ = false;
      throw;
    }
    lk.lock();
  }
  cv_.wait(lk, [&] { return answered_; });
  waiting_ = false;
  answered_ = false;
  std::exception_ptr a = std::move(answer_);
  answer_ = nullptr;
  return a;
}

bool Mailbox::answered() const {
  std::lock_guard<std::mutex> lk(m_);
  return waiting_ && answered_;
}

Event Mailbox::take() {
  std::unique_lock<std::mutex> lk(m_);
  cv_.wait(lk, [&] { return !queue_.empty(); });
  Event e = std::move(queue_.front());
  queue_.pop_front();
  return e;
}

void Mailbox::answer(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lk(m_);
    answer_ = std::move(error);
    answered_ = true;
  }
  cv_.notify_all();
  if (on_answer_) on_answer_();
}

}  // namespace h3::engine_detail
