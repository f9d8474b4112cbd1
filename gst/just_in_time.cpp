#include "just_in_time.h"

#include <algorithm>

namespace h3gst {

void JustInTime::queued(Clock::time_point at, int64_t frames) {
  used_up_ = at + frames * frame_;
}

void JustInTime::produced(Clock::duration time) {
  productions_.push_back(time);
  if (productions_.size() > kRemembered) productions_.pop_front();
}

JustInTime::Clock::duration JustInTime::lead() const {
  if (productions_.empty()) return Clock::duration::zero();
  const Clock::duration slowest = *std::max_element(productions_.begin(), productions_.end());
  return slowest + slowest / 4 + 2 * frame_;
}

JustInTime::Clock::time_point JustInTime::begin_next() const {
  if (productions_.empty() || used_up_ == Clock::time_point{}) return Clock::time_point{};
  return used_up_ - lead();
}

}  // namespace h3gst
