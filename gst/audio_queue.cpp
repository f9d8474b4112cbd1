#include "audio_queue.h"

#include <algorithm>

namespace h3gst {

AudioQueue::PopResult AudioQueue::pop(AudioSlice* slice, int64_t max_samples, h3gst::EngineFailure* failure) {
  const Taken t = take_front(
      [&](const AudioChunk& c, int64_t used) {
        slice->first_sample = c.first_sample + used;
        slice->count = std::min(std::max<int64_t>(1, max_samples), c.count - used);
        slice->channels = c.channels;
        slice->data = c.samples.get() + static_cast<size_t>(used * c.channels);
        slice->keep = c.samples;
        return slice->count;
      },
      failure);
  switch (t) {
    case Taken::kItem: return PopResult::kSamples;
    case Taken::kFlushing: return PopResult::kFlushing;
    case Taken::kEnd: return PopResult::kEnd;
    case Taken::kError: break;
  }
  return PopResult::kError;
}

}  // namespace h3gst
