#include "engine/stage_decode.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <exception>
#include <string>

#include "common/error.h"

namespace h3::engine_detail {
namespace {

// Rank 0's sink: trims the clip to the requested frame count, hands each chunk over to the
// calling thread and waits for it, and turns a requested cancel into a failure at the chunk
// boundary (the decoder agrees on it across ranks).
class HandOverSink : public ChunkSink {
 public:
  explicit HandOverSink(const StageContext& c) : c_(c) {}

  void on_chunk(const Chunk& c) override {
    const ClipPlan& plan = c_.plan;
    if (frames_ >= plan.num_frames) return;  // frames past the request: trimmed (all were delivered)
    if (c_.cancel.requested()) {
      throw Error(ErrorKind::kCancelled, "cancelled during decoding (after " + std::to_string(index_) +
                                             " of " + std::to_string(plan.total_chunks) + " chunks)");
    }
    if (c.first_frame != frames_) {
      throw Error(ErrorKind::kInternal, "chunk " + std::to_string(c.index) + " starts at frame " +
                                            std::to_string(c.first_frame) + ", expected " +
                                            std::to_string(frames_));
    }
    const int64_t n = std::min<int64_t>(c.frames.size(0), plan.num_frames - frames_);
    Event e{Event::Kind::kChunk};
    e.chunk.index = index_;
    e.chunk.first_frame = frames_;
    e.chunk.total_frames = plan.num_frames;
    e.chunk.final = frames_ + n == plan.num_frames;
    e.chunk.frames = n == c.frames.size(0) ? c.frames : c.frames.narrow(0, 0, n).contiguous();
    if (c.frames_f32.defined()) e.chunk.frames_f32 = c.frames_f32.narrow(0, 0, n).contiguous();
    if (std::exception_ptr err = c_.mailbox.call(std::move(e))) {
      sink_error_ = err;
      std::rethrow_exception(err);
    }
    ++index_;
    frames_ += n;
    c_.post_progress(Phase::kDecoding, 0, 0, index_, frames_);
  }

  std::exception_ptr sink_error() const { return sink_error_; }
  int64_t frames() const { return frames_; }

 private:
  const StageContext& c_;
  int64_t index_ = 0, frames_ = 0;
  std::exception_ptr sink_error_;
};

}  // namespace

void decode_stage(const StageContext& c, const at::Tensor& video) {
  const ClipPlan& p = c.plan;
  vae::DecodeOptions o;
  o.height = p.height;
  o.width = p.width;
  if (!c.root()) {
    c.parts.vae->decode_chunks(video, nullptr, c.group, o);
    return;
  }
  c.post_progress(Phase::kDecoding, p.evaluations, p.evaluations);
  HandOverSink sink(c);
  try {
    c.parts.vae->decode_chunks(video, &sink, c.group, o);
  } catch (...) {
    // The caller's own exception, not the decoder's wrapping of it.
    if (sink.sink_error()) std::rethrow_exception(sink.sink_error());
    throw;
  }
  if (sink.frames() != p.num_frames) {
    throw Error(ErrorKind::kInternal, "the decode delivered " + std::to_string(sink.frames()) +
                                          " frames of " + std::to_string(p.num_frames));
  }
}

}  // namespace h3::engine_detail
