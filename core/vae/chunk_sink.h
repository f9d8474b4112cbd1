// The chunk sink: where decoded temporal chunks go (docs/architecture.md, docs/vae.md "Sink contract").
//
// Exactly one owner, rank 0, supplies the sink; every rank agrees on that
// before decoding. on_chunk receives committed frames in order, each chunk as
// soon as it is decoded: post temporal blend, post pad trim, cropped. If
// on_chunk throws, the owner stops emitting and every rank stops at the next
// chunk boundary; the error reaches the caller on rank 0 (h3::Error
// kCallback) and peers end with a peer error (kDistributed).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace h3 {

struct Chunk {
  int64_t index;         // 0, 1, ... in emission order
  int64_t first_frame;   // output frame number of frames[0]
  int64_t total_frames;  // frames of the whole clip (all chunks together)
  bool final;            // the last chunk of the clip
  at::Tensor frames;     // uint8 RGB [n, H, W, 3], contiguous, cropped to the requested size
  // fp32 RGB [n, H, W, 3] in [0, 1], the values `frames` was rounded from; only defined
  // when the decode was asked for float frames (DecodeOptions::float_frames).
  at::Tensor frames_f32;
  // The soundtrack's stretch that goes with chunk `index`, only when the request asked for
  // audio (GenerationRequest::audio; the engine fills it, the VAE never does): f32 [n, 2]
  // interleaved stereo samples (left, right) in [-1, 1] at ClipPlan::audio_rate, the clip's
  // samples [first_sample, first_sample + n). The engine hands a chunk's frames over first and
  // its audio after, in a chunk of the same index without frames (`frames` undefined), so that
  // the frames never wait for the audio decode. See docs/engine.md "Audio".
  at::Tensor audio;
  int64_t first_sample = 0;
  // Set by the engine's hand-over: the time this chunk's frames took to decode, from the previous
  // chunk's hand-over (or the decode's start) to this one, waiting for the consumer excluded.
  int64_t decode_ns = 0;
};

class ChunkSink {
 public:
  virtual ~ChunkSink();
  // Called on the decoding thread of rank 0. The tensors are fresh for each chunk and the
  // decoder drops its references when the call returns: a sink may keep them without copying.
  virtual void on_chunk(const Chunk& c) = 0;
};

}  // namespace h3
