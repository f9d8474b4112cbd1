// The decode stage: the streaming VAE decode of the final latents over every rank, rank 0
// handing each chunk, trimmed to the requested frame count, to the caller's sink and waiting
// for it; a requested cancel stops the decode at a chunk boundary. When the request asked for
// audio, rank 0 also decodes the soundtrack's stretch that goes with each chunk and hands it
// over together with the chunk (docs/engine.md "Audio").
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "engine/stages/stage.h"
#include "vae/latent_source.h"

namespace h3::engine_detail {

// The soundtrack's latents as the decode reaches them: all of them at once (the euler sampler)
// or chunk by chunk as they are made (the causal sampler). Read on rank 0 only.
class AudioLatents {
 public:
  virtual ~AudioLatents() = default;
  virtual int64_t total() const = 0;      // A: latents per channel of the whole clip
  virtual int64_t available() const = 0;  // latents [0, available()) exist
  // Rows [2n, C] (left channel's n, then the right's) of latents [begin, end), which exist and
  // were not released.
  virtual at::Tensor rows(int64_t begin, int64_t end) const = 0;
  // Latents before `latent` will not be read again.
  virtual void release_before(int64_t latent) { (void)latent; }
};

// Thrown by a latent source on every rank at the same chunk boundary when an endless stream
// ends there (the caller finished it): decode_stage delivers the soundtrack up to the last frame
// handed over and returns normally.
struct StreamEnd {};

// Audio rows [2A, C] held whole.
class WholeAudio : public AudioLatents {
 public:
  explicit WholeAudio(at::Tensor rows) : rows_(std::move(rows)) {}
  int64_t total() const override { return rows_.size(0) / 2; }
  int64_t available() const override { return total(); }
  at::Tensor rows(int64_t begin, int64_t end) const override;

 private:
  at::Tensor rows_;
};

// Every rank, before a request that asks for audio: rank 0 loads the audio decoder from the
// model's audio_vae/ unless it holds it already; a failure is agreed (every rank throws it).
void load_audio_decoder(const StageContext& c);

// Every rank: decodes `video` ([1, C, T, h, w] fp32 CPU, the same on every rank). `audio_rows`
// ([2A, 32] fp32 CPU, rank 0's is read) is decoded with it when defined; load_audio_decoder()
// must have run.
void decode_stage(const StageContext& c, const at::Tensor& video, const at::Tensor& audio_rows = {});
// The same over latents a source makes as the decode asks for them; `audio` (rank 0's is read;
// null: video only) grows with them. A chunk's stretch of the soundtrack is handed over as soon
// as it can be decoded exactly: the decoder's context (AudioDecoder::context_latents) past its
// end exists, or the clip's audio is complete.
void decode_stage(const StageContext& c, vae::LatentSource& video, AudioLatents* audio);

}  // namespace h3::engine_detail
