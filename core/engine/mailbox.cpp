#include "engine/mailbox.h"

namespace h3::engine_detail {

void Mailbox::post(Event e) {
  {
    std::lock_guard<std::mutex> lk(m_);
    queue_.push_back(std::move(e));
  }
  cv_.notify_all();
}

std::exception_ptr Mailbox::call(Event e) {
  std::unique_lock<std::mutex> lk(m_);
  waiting_ = true;
  answered_ = false;
  e.awaits_answer = true;
  queue_.push_back(std::move(e));
  cv_.notify_all();
  cv_.wait(lk, [&] { return answered_; });
  waiting_ = false;
  answered_ = false;
  std::exception_ptr a = std::move(answer_);
  answer_ = nullptr;
  return a;
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
}

}  // namespace h3::engine_detail
