// The engine's chunks (at::Tensor, vae/chunk_sink.h) handed on as torch-free FrameChunks
// (h3/frame_chunk.h) without copying a pixel: each chunk's tensor stays alive behind its
// FrameChunk's pointer for as long as the consumer holds it. The one adapter of both torch-free
// faces of the engine: the GStreamer engine module (gst-engine/) and h3::Generator (h3/generator.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "h3/frame_chunk.h"
#include "vae/chunk_sink.h"

namespace h3 {

class CallbackSink : public ChunkSink {
 public:
  // `consumer` names who receives the chunks, for the cancel it causes by returning false
  // ("<consumer> stopped taking frames"). `audio_rate`: the plan's (ClipPlan::audio_rate).
  CallbackSink(const std::function<bool(FrameChunk&&)>& on_chunk, int64_t audio_rate, std::string consumer);
  // Throws h3::Error(kCancelled) when on_chunk returns false, kInternal for a chunk that is not
  // uint8 [n, H, W, 3] frames or f32 [n, 2] samples.
  void on_chunk(const Chunk& c) override;
  // The consumer went away (on_chunk returned false): whatever error the engine reports for
  // the sink's exception, the request was cancelled.
  bool stopped() const { return stopped_; }

 private:
  const std::function<bool(FrameChunk&&)>& on_chunk_;
  const int64_t audio_rate_;
  const std::string consumer_;
  bool stopped_ = false;
};

}  // namespace h3
