#include "engine/process/job_slot.h"

#include <algorithm>
#include <utility>

namespace h3::engine_detail {

void JobSlot::open_for_jobs() {
  std::lock_guard<std::mutex> lk(m_);
  serving_ = true;
}

std::vector<DispatchedJob> JobSlot::close_for_jobs() {
  std::vector<DispatchedJob> orphans;
  {
    std::lock_guard<std::mutex> lk(m_);
    serving_ = false;
    for (auto& d : offered_) orphans.push_back(std::move(d));
    offered_.clear();
  }
  cv_.notify_all();  // wait_until_taking()
  return orphans;
}

uint64_t JobSlot::offer(DispatchedJob d) {
  uint64_t n = 0;
  {
    std::lock_guard<std::mutex> lk(m_);
    if (!serving_ || closed_) return 0;
    n = ++offers_;
    d.offer = n;
    offered_.push_back(std::move(d));
  }
  cv_.notify_all();
  return n;
}

bool JobSlot::withdraw(uint64_t offer) {
  std::lock_guard<std::mutex> lk(m_);
  const auto it = std::find_if(offered_.begin(), offered_.end(),
                               [&](const DispatchedJob& d) { return d.offer == offer; });
  if (it == offered_.end()) return false;
  offered_.erase(it);
  return true;
}

void JobSlot::wait_until_taking() {
  std::unique_lock<std::mutex> lk(m_);
  cv_.wait(lk, [&] { return closed_ || !serving_ || taking_; });
}

std::optional<DispatchedJob> JobSlot::take() {
  std::lock_guard<std::mutex> lk(m_);
  if (closed_ || offered_.empty()) return std::nullopt;
  std::optional<DispatchedJob> d = std::move(offered_.front());
  offered_.pop_front();
  return d;
}

void JobSlot::wait_for_work(const std::function<bool(size_t pending, bool closed)>& wake) {
  std::unique_lock<std::mutex> lk(m_);
  for (;;) {
    if (wake(offered_.size(), closed_)) break;
    taking_ = offered_.empty();
    if (taking_) cv_.notify_all();  // wait_until_taking()
    const uint64_t rung = rings_;
    const size_t offers = offered_.size();
    const bool closed = closed_;
    cv_.wait(lk, [&] { return rings_ != rung || offered_.size() != offers || closed_ != closed; });
  }
  taking_ = false;
}

void JobSlot::ring() {
  {
    std::lock_guard<std::mutex> lk(m_);
    ++rings_;
  }
  cv_.notify_all();
}

size_t JobSlot::pending() const {
  std::lock_guard<std::mutex> lk(m_);
  return offered_.size();
}

bool JobSlot::closed() const {
  std::lock_guard<std::mutex> lk(m_);
  return closed_;
}

bool JobSlot::wait_for_rejoin() {
  std::unique_lock<std::mutex> lk(m_);
  cv_.wait(lk, [&] { return closed_ || rejoin_; });
  if (closed_) return false;
  rejoin_ = false;
  return true;
}

void JobSlot::close() {
  {
    std::lock_guard<std::mutex> lk(m_);
    closed_ = true;
  }
  cv_.notify_all();
}

void JobSlot::request_rejoin() {
  {
    std::lock_guard<std::mutex> lk(m_);
    rejoin_ = true;
  }
  cv_.notify_all();
}

}  // namespace h3::engine_detail
