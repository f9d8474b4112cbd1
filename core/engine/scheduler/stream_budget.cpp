#include "engine/scheduler/stream_budget.h"

#include <sstream>
#include <utility>

#include "engine/planning/memory_guard.h"
#include "h3/error.h"

namespace h3 {

StreamBudget::StreamBudget(int64_t max_memory, std::function<int64_t()> available)
    : max_memory_(max_memory), available_(std::move(available)) {}

StreamBudget::Reservation::Reservation(Reservation&& o) noexcept
    : budget_(std::exchange(o.budget_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

StreamBudget::Reservation& StreamBudget::Reservation::operator=(Reservation&& o) noexcept {
  if (this != &o) {
    if (budget_) budget_->release(bytes_);
    budget_ = std::exchange(o.budget_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

StreamBudget::Reservation::~Reservation() {
  if (budget_) budget_->release(bytes_);
}

StreamBudget::Reservation StreamBudget::admit(int64_t bytes, const std::string& request) {
  std::lock_guard<std::mutex> lk(m_);
  const bool given = max_memory_ > 0;
  if (!given && running_ == 0) measured_ = available_ ? available_() : 0;
  const int64_t budget = given ? max_memory_ : measured_;
  if (budget > 0) {
    const std::string why = admission_refusal(request, bytes, running_, reserved_, budget, given);
    if (!why.empty()) throw Error(ErrorKind::kOutOfMemory, why);
  }
  ++running_;
  reserved_ += bytes;
  return Reservation(this, bytes);
}

void StreamBudget::release(int64_t bytes) {
  std::lock_guard<std::mutex> lk(m_);
  --running_;
  reserved_ -= bytes;
}

int StreamBudget::running() const {
  std::lock_guard<std::mutex> lk(m_);
  return running_;
}

int64_t StreamBudget::reserved() const {
  std::lock_guard<std::mutex> lk(m_);
  return reserved_;
}

std::string admission_refusal(const std::string& request, int64_t need, int running, int64_t held,
                              int64_t budget, bool given) {
  if (held + need <= budget) return "";
  const std::string of =
      given ? "the max-memory limit of " + format_bytes(budget) + " for all requests together"
            : format_bytes(budget) + (running > 0 ? " that was available when the first of them started"
                                                  : " available (MemAvailable, or the cgroup's memory.max)");
  std::ostringstream msg;
  msg << "the request (" << request << ") needs about " << format_bytes(need)
      << " beside the loaded weights, but ";
  if (running > 0) {
    msg << "the " << running << (running == 1 ? " request" : " requests") << " this engine runs hold "
        << format_bytes(held) << " of " << of << ", leaving " << format_bytes(budget - held)
        << ": it is refused and they go on. Start it when one of them has ended, or raise";
  } else {
    msg << "that is more than " << of << ". Ask for less, or raise";
  }
  msg << " the limit with max-memory / --max-memory if the estimate is too cautious for this machine.";
  return msg.str();
}

}  // namespace h3
