#include "prompt_times.h"

namespace h3gst {

void PromptTimes::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.clear();
  origin_ = GST_CLOCK_TIME_NONE;
}

void PromptTimes::applied(int64_t chunk, int64_t first_frame) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.push_back({chunk, first_frame});
}

int64_t PromptTimes::pushed(int64_t frame, GstClockTime stream_time, GstClockTime running_time) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (GST_CLOCK_TIME_IS_VALID(running_time) && GST_CLOCK_TIME_IS_VALID(stream_time) &&
      running_time >= stream_time) {
    origin_ = running_time - stream_time;
  }
  // A change whose first frame never went out (a pad that drains without pushing) is dropped.
  while (!pending_.empty() && pending_.front().first_frame < frame) pending_.pop_front();
  if (pending_.empty() || pending_.front().first_frame != frame) return -1;
  const int64_t chunk = pending_.front().chunk;
  pending_.pop_front();
  return chunk;
}

GstClockTime PromptTimes::to_stream_time(GstClockTime running_time) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!GST_CLOCK_TIME_IS_VALID(origin_)) return running_time;
  return running_time > origin_ ? running_time - origin_ : 0;
}

}  // namespace h3gst
