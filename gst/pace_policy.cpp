#include "pace_policy.h"

#include <algorithm>

namespace h3gst {

PacePolicy::PacePolicy(const PaceSettings& settings) : s_(settings), steps_(settings.steps) {}

void PacePolicy::downstream(int64_t lateness_ns) {
  downstream_ = downstream_ ? std::max(*downstream_, lateness_ns) : lateness_ns;
}

std::optional<PaceDecision> PacePolicy::observe(int64_t chunk, std::optional<int64_t> lateness_ns,
                                                int64_t production_ns) {
  // Downstream's word counts when it says the chunk is later than the element saw it.
  const bool from_downstream = downstream_ && (!lateness_ns || *downstream_ > *lateness_ns);
  const std::optional<int64_t> seen = from_downstream ? downstream_ : lateness_ns;
  downstream_.reset();
  if (!seen) return std::nullopt;  // nothing said of this chunk
  const int64_t late = *seen;
  // A change on its way, or a chunk made before the last one took effect: nothing to judge.
  if (asked_ != 0 || chunk < counts_from_) return std::nullopt;
  if (late > s_.late_ns) {
    ahead_ = 0;
    if (++late_ < s_.late_chunks || steps_ <= s_.min_steps) return std::nullopt;
    asked_ = steps_ - 1;
    return PaceDecision{asked_, late, from_downstream ? "downstream" : "late"};
  }
  late_ = 0;
  if (late > 0 || steps_ >= s_.steps) {
    ahead_ = 0;
    return std::nullopt;
  }
  // On time. One more forward, scaled from this count's production time, must fit.
  const double next_ns =
      static_cast<double>(production_ns) * static_cast<double>(steps_ + 2) / static_cast<double>(steps_ + 1);
  if (production_ns <= 0 || next_ns > s_.headroom * static_cast<double>(s_.period_ns)) {
    ahead_ = 0;
    return std::nullopt;
  }
  if (++ahead_ < s_.ahead_chunks) return std::nullopt;
  asked_ = steps_ + 1;
  return PaceDecision{asked_, late, "caught up"};
}

void PacePolicy::applied(int64_t chunk, int64_t steps) {
  steps_ = steps;
  asked_ = 0;
  counts_from_ = chunk;
  late_ = ahead_ = 0;
}

}  // namespace h3gst
