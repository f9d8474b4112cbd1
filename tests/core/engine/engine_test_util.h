#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "../text/test_util.h"
#include "engine/engine.h"

namespace h3::test {

// Keeps every chunk; checks the contract's ordering as they arrive. A request with audio hands
// each chunk's soundtrack stretch over after its frames, in a chunk of the same index without
// frames: those go to `audio`.
class CollectSink : public ChunkSink {
 public:
  void on_chunk(const Chunk& c) override {
    if (!c.frames.defined()) {
      EXPECT_TRUE(c.audio.defined()) << "a chunk with neither frames nor audio";
      EXPECT_EQ(c.index, static_cast<int64_t>(chunks.size()) - 1) << "audio before its chunk's frames";
      EXPECT_EQ(c.index, static_cast<int64_t>(audio.size())) << "two stretches for one chunk";
      audio.push_back(c);
      return;
    }
    EXPECT_FALSE(c.audio.defined()) << "frames and audio in one hand-over";
    EXPECT_EQ(c.index, static_cast<int64_t>(chunks.size()));
    EXPECT_EQ(c.first_frame, frames_so_far);
    EXPECT_FALSE(seen_final) << "a chunk after the final one";
    EXPECT_TRUE(c.frames.is_contiguous());
    EXPECT_EQ(c.frames.scalar_type(), at::kByte);
    seen_final = c.final;
    frames_so_far += c.frames.size(0);
    chunks.push_back(c);
  }
  at::Tensor all() const {
    std::vector<at::Tensor> f;
    for (const auto& c : chunks) f.push_back(c.frames);
    return at::cat(f, 0);
  }
  std::vector<Chunk> chunks;  // the frames' chunks
  std::vector<Chunk> audio;   // the soundtrack's stretches, one per chunk, after its frames
  int64_t frames_so_far = 0;
  bool seen_final = false;
};

// Extras whose on_latents keeps copies of the final latents in *video and *audio.
inline GenerateExtras keep_latents(at::Tensor* video, at::Tensor* audio) {
  GenerateExtras x;
  x.on_latents = [video, audio](const at::Tensor& v, const at::Tensor& a) {
    *video = v.clone();
    *audio = a.clone();
  };
  return x;
}

inline std::unique_ptr<Engine> open_tiny(int ranks) {
  EngineOptions o;
  o.model_dir = default_model_dir();
  o.ranks = ranks;
  o.timeout = std::chrono::seconds(60);
  return Engine::open(o);
}

}  // namespace h3::test
