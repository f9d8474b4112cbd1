// How many prompt changes the live server passes on per rolling second, all viewers together:
// a page that sends 100 changes in a second must not make the engine re-encode a prompt for
// every one of them (each change costs the chunk that takes it its text encode and prefill).
// Knows nothing of GStreamer or HTTP; the caller gives the time, so tests need no clock.
#pragma once

#include <cstdint>
#include <deque>

namespace h3live {

class PromptRate {
 public:
  explicit PromptRate(int per_second) : per_second_(per_second) {}

  // True (and counted) when fewer than per_second changes were taken in the second before
  // now_us; false (not counted) otherwise.
  bool take(int64_t now_us);
  // Microseconds until take() would succeed; 0 when it would now.
  int64_t wait_us(int64_t now_us) const;

 private:
  int per_second_;
  std::deque<int64_t> taken_us_;  // the times of the changes taken within the last second
};

}  // namespace h3live
