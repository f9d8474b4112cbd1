#include "frame_queue.h"

namespace h3gst {

FrameQueue::PopResult FrameQueue::pop(Frame* frame, h3gst::EngineFailure* failure) {
  const Taken t = take_front(
      [&](const FrameChunk& c, int64_t i) {
        frame->index = c.first_frame + i;
        frame->width = c.width;
        frame->height = c.height;
        frame->data = c.pixels.get() + static_cast<size_t>(i) * c.frame_bytes();
        frame->chunk_start = i == 0;
        frame->keep = c.pixels;
        return int64_t{1};
      },
      failure);
  switch (t) {
    case Taken::kItem: return PopResult::kFrame;
    case Taken::kFlushing: return PopResult::kFlushing;
    case Taken::kEnd: return PopResult::kEnd;
    case Taken::kError: break;
  }
  return PopResult::kError;
}

}  // namespace h3gst
