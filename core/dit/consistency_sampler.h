// The chunk-major consistency sampler of RAVEN-Streaming (docs/causal.md "Sampler"): each chunk
// of the clip is carried to completion in `steps` forwards of the chunk-causal DiT against the
// KV cache, x0 = x_t + sigma v, then re-noised to the next sigma of a shifted trailing grid
// with fresh noise; its last x0 is the chunk, delivered at once, and a clean forward commits
// it to the cache before the next chunk starts. The RNG contract is the reference's: one CPU
// generator seeded with the request's seed draws, in order, the whole clip's video and audio
// noise and clean eps, then per chunk and step the video and the audio step noise (also when
// the next sigma is 0), so that a seed gives the reference's clip. The draws are made on rank
// 0 and broadcast: every rank runs on the very same numbers.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "dit/causal.h"
#include "dit/chunk_layout.h"
#include "dit/kv_cache.h"
#include "dit/transformer.h"

namespace h3::dit {

struct CausalSettings {
  int64_t steps = 4;                  // forwards per chunk (NFEs), >= 1
  int64_t sink = 2;                   // pinned cache records, the text being the first; >= 1
  std::optional<int64_t> window = 2;  // recent chunks kept; none: no eviction
  double video_shift = 12.0, audio_shift = 3.0;
};
// Throws h3::Error(kInvalidArgument) naming the setting and its range.
void check_causal_settings(const CausalSettings& s);

// sigma_i = s u / (1 + (s - 1) u), u = 1 - i / N, i = 0..N-1 (double): the grid of one stream.
// The step after the last goes to sigma 0.
std::vector<double> consistency_sigmas(int64_t steps, double shift);

struct CausalRequest {
  at::Tensor text;       // [L, text_dim] encoder states
  at::Tensor text_tags;  // [L] or undefined (all text)
  uint64_t seed = 0;
  int64_t video_latents = 0;  // T = 5k + 2
  int64_t latent_h = 0, latent_w = 0;
  int64_t audio_latents = 0;  // per channel
  CausalSettings settings;
};

// One finished chunk: the last step's x0, fp32 on the CPU.
struct CausalChunk {
  ChunkSpan span;
  at::Tensor video;  // [1, C, t_c, h, w]
  at::Tensor audio;  // [2 a_c, 32] rows (left, then right)
  bool last = false;
};

// Called after every step of a chunk with its x0 (video [1, C, t_c, h, w], audio latent
// [1, 32, 2, a_c]); it may throw to stop (an agreed cancellation).
using CausalStepCallback = std::function<void(const ChunkSpan& span, int64_t step, int64_t steps,
                                              const at::Tensor& x0_video, const at::Tensor& x0_audio)>;

class CausalSampler {
 public:
  // Draws the whole clip's noise and prefills the text: a collective over the model's group.
  CausalSampler(const Transformer& model, CausalRequest request);

  const std::vector<ChunkSpan>& spans() const { return spans_; }
  bool done() const { return next_ == static_cast<int64_t>(spans_.size()); }
  const KvCache& cache() const { return cache_; }
  int64_t forwards() const { return forwards_; }  // DiT forwards run so far (the prefill included)

  // Commits the previous chunk (its clean forward) and carries the next one through its steps.
  // A collective; throws h3::Error(kInternal) when done().
  CausalChunk next(const CausalStepCallback& on_step = {});

 private:
  at::Tensor draw(at::IntArrayRef shape);  // the next draw of the contract, the same on every rank
  void commit_previous();

  const Transformer& model_;
  CausalRequest req_;
  std::vector<ChunkSpan> spans_;
  std::vector<double> sigma_v_, sigma_a_;
  KvCache cache_;
  std::optional<at::Generator> gen_;  // rank 0 only
  // The whole clip's draws, cut per chunk: each chunk's slice is released once it is used.
  std::vector<at::Tensor> noise_v_, noise_a_, clean_v_, clean_a_;
  at::Tensor pending_v_, pending_a_;  // the previous chunk's x0 until it is committed
  int64_t next_ = 0;
  int64_t forwards_ = 0;
};

}  // namespace h3::dit
