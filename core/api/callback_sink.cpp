#include "api/callback_sink.h"

#include <ATen/core/Tensor.h>

#include <memory>
#include <utility>

#include "h3/error.h"

namespace h3 {
namespace {

// The chunk's soundtrack stretch ([n, 2] f32, interleaved), kept alive by its samples' owner.
AudioChunk audio_chunk(const Chunk& c, int64_t rate) {
  at::Tensor a = c.audio.to(at::kCPU).contiguous();
  if (a.scalar_type() != at::kFloat || a.dim() != 2 || a.size(1) != 2) {
    throw Error(ErrorKind::kInternal,
                "chunk " + std::to_string(c.index) + "'s audio is not f32 [n, 2] interleaved samples");
  }
  AudioChunk ac;
  ac.first_sample = c.first_sample;
  ac.count = a.size(0);
  ac.channels = 2;
  ac.rate = static_cast<int>(rate);
  const float* data = a.data_ptr<float>();
  ac.samples =
      std::shared_ptr<const float>(data, [keep = std::move(a)](const float*) mutable { keep.reset(); });
  return ac;
}

// The decoder gives every chunk fresh tensors and drops its own references when on_chunk returns
// (vae/chunk_sink.h), so the FrameChunk keeps the tensor alive instead.
void add_frames(const Chunk& c, FrameChunk& fc) {
  at::Tensor t = c.frames.to(at::kCPU).contiguous();
  if (t.scalar_type() != at::kByte || t.dim() != 4 || t.size(3) != 3) {
    throw Error(ErrorKind::kInternal,
                "chunk " + std::to_string(c.index) + " is not uint8 [n, H, W, 3] RGB frames");
  }
  fc.count = t.size(0);
  fc.height = t.size(1);
  fc.width = t.size(2);
  const uint8_t* data = t.data_ptr<uint8_t>();
  fc.pixels =
      std::shared_ptr<const uint8_t>(data, [keep = std::move(t)](const uint8_t*) mutable { keep.reset(); });
  fc.decode_ns = c.decode_ns;
}

}  // namespace

CallbackSink::CallbackSink(const std::function<bool(FrameChunk&&)>& on_chunk, int64_t audio_rate,
                           std::string consumer)
    : on_chunk_(on_chunk), audio_rate_(audio_rate), consumer_(std::move(consumer)) {}

void CallbackSink::on_chunk(const Chunk& c) {
  FrameChunk fc;
  fc.index = c.index;
  fc.first_frame = c.first_frame;
  if (c.frames.defined()) add_frames(c, fc);
  if (c.audio.defined()) fc.audio = audio_chunk(c, audio_rate_);
  if (!on_chunk_(std::move(fc))) {
    stopped_ = true;
    throw Error(ErrorKind::kCancelled, consumer_ + " stopped taking frames");
  }
}

}  // namespace h3
