#include "engine/job_slot.h"

#include <utility>

#include "common/error.h"

namespace h3::engine_detail {

void JobSlot::open_for_jobs() {
  std::lock_guard<std::mutex> lk(m_);
  serving_ = true;
}

std::optional<DispatchedJob> JobSlot::close_for_jobs() {
  std::optional<DispatchedJob> orphan;
  {
    std::lock_guard<std::mutex> lk(m_);
    serving_ = false;
    orphan = std::move(offered_);
    offered_.reset();
  }
  cv_.notify_all();  // wait_until_taking()
  return orphan;
}

bool JobSlot::offer(DispatchedJob d) {
  {
    std::lock_guard<std::mutex> lk(m_);
    if (!serving_ || closed_) return false;
    if (offered_) throw Error(ErrorKind::kInternal, "a job was offered while another one waited to be taken");
    offered_ = std::move(d);
  }
  cv_.notify_all();
  return true;
}

bool JobSlot::withdraw() {
  std::lock_guard<std::mutex> lk(m_);
  const bool had = offered_.has_value();
  offered_.reset();
  return had;
}

void JobSlot::wait_until_taking() {
  std::unique_lock<std::mutex> lk(m_);
  cv_.wait(lk, [&] { return closed_ || !serving_ || taking_; });
}

std::optional<DispatchedJob> JobSlot::take() {
  std::unique_lock<std::mutex> lk(m_);
  if (!closed_ && !offered_) {
    taking_ = true;
    cv_.notify_all();  // wait_until_taking()
    cv_.wait(lk, [&] { return closed_ || offered_.has_value(); });
    taking_ = false;
  }
  if (closed_) return std::nullopt;
  std::optional<DispatchedJob> d = std::move(offered_);
  offered_.reset();
  return d;
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
