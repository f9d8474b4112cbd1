#include "prompt_rate.h"

namespace h3live {
namespace {
constexpr int64_t kSecondUs = 1000000;
}

bool PromptRate::take(int64_t now_us) {
  while (!taken_us_.empty() && taken_us_.front() <= now_us - kSecondUs) taken_us_.pop_front();
  if (static_cast<int>(taken_us_.size()) >= per_second_) return false;
  taken_us_.push_back(now_us);
  return true;
}

int64_t PromptRate::wait_us(int64_t now_us) const {
  if (static_cast<int>(taken_us_.size()) < per_second_) return 0;
  const int64_t due = taken_us_[taken_us_.size() - per_second_] + kSecondUs;
  return due > now_us ? due - now_us : 0;
}

}  // namespace h3live
