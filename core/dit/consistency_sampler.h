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
  // Relative positions (chunk_layout.h relative_shift): the window and the current chunk move
  // back in steps of 3 chunks once the stream passes a clip of `trained_chunks` chunks (the
  // model's default length); needs a window. Off: every chunk at its absolute positions.
  bool relative_positions = false;
  int64_t trained_chunks = 0;
  // At a prompt change, recompute the kept chunks' keys and values under the new prompt (their
  // commit forwards again, in order, each attending the new prompt and the records before it);
  // off, they stay as computed under the old one.
  bool recache_on_switch = false;
};
// Throws h3::Error(kInvalidArgument) naming the setting and its range.
void check_causal_settings(const CausalSettings& s);

// sigma_i = s u / (1 + (s - 1) u), u = 1 - i / N, i = 0..N-1 (double): the grid of one stream.
// The step after the last goes to sigma 0.
std::vector<double> consistency_sigmas(int64_t steps, double shift);

// The distinct timesteps of every forward the sampler runs with these settings: each step's
// {t_video, t_audio} and the clean t = 0.999 of the text prefill and the commits (what its AdaLN
// tables need; the same for every chunk, endless or not).
std::vector<TimestepSet> causal_timesteps(const CausalSettings& s);
// Those of every step count from `min_steps` (0: s.steps alone) to s.steps (a stream whose steps may change
// while it runs: CausalSampler::change_steps), each set once.
std::vector<TimestepSet> causal_timesteps(const CausalSettings& s, int64_t min_steps);

struct CausalRequest {
  at::Tensor text;       // [L, text_dim] encoder states
  at::Tensor text_tags;  // [L] or undefined (all text)
  uint64_t seed = 0;
  int64_t video_latents = 0;  // T = 5k + 2 (unused when endless)
  int64_t latent_h = 0, latent_w = 0;
  int64_t audio_latents = 0;  // per channel (unused when endless)
  // A stream without an end: full chunks only, one after another for as long as next() is
  // called. The reference's contract draws the whole clip first, which an endless stream cannot:
  // here each chunk draws its own video and audio noise and clean eps at its start, then its
  // steps' noise (the same seed still gives the same stream).
  bool endless = false;
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

  // The chunks of a finite clip (empty when endless); chunk c's span; the number of chunks (-1:
  // endless).
  const std::vector<ChunkSpan>& spans() const { return spans_; }
  ChunkSpan span(int64_t chunk) const;
  int64_t chunks() const;
  bool done() const { return !req_.endless && next_ == static_cast<int64_t>(spans_.size()); }
  int64_t next_index() const { return next_; }
  const KvCache& cache() const { return cache_; }
  int64_t forwards() const { return forwards_; }  // DiT forwards run so far (the prefill included)

  // Commits the previous chunk (its clean forward) and carries the next one through its steps.
  // A collective; throws h3::Error(kInternal) when done().
  CausalChunk next(const CausalStepCallback& on_step = {});

  // A new prompt (encoder states [L', text_dim], tags or undefined) from the next chunk on: its
  // prefill replaces the cache's first record before that chunk's first step; the chunks the
  // cache keeps stay (recache_on_switch: recomputed under it), and so does the media clock's
  // origin (the first prompt's length). Every rank calls it between the same two next() calls.
  void change_text(at::Tensor text, at::Tensor text_tags);
  // The same change for the chunk in the making: called from next()'s step callback, it makes
  // that chunk begin again once the callback returns, under the new prompt (its prefill, and
  // with recache_on_switch the kept chunks' records) and from the chunk's own draws (the
  // generator goes back to where it stood at the chunk's start), so the stream is the one whose
  // change came at that chunk's boundary. A prompt given while a chunk is being made then shows
  // from that chunk, not the next (docs/causal.md "Live"); the forwards already run are lost.
  // Every rank calls it in the same step's callback.
  void remake_with_text(at::Tensor text, at::Tensor text_tags);
  // Forwards per chunk from the next chunk on (>= 1; throws h3::Error(kInvalidArgument) else): its
  // grid is built for the new count; the RNG contract draws that many steps' noise for it, so the
  // same seed and the same changes at the same chunks give the same stream. Every rank calls it
  // between the same two next() calls.
  void change_steps(int64_t steps);
  int64_t steps() const { return req_.settings.steps; }  // of the next chunk

  // Relative positions: the chunks the window and the next chunk are moved back by now (0:
  // where they are), and the highest chunk the current chunk sits at.
  int64_t position_shift() const { return shift_; }
  int64_t anchor() const { return anchor_; }
  // recache_on_switch: the bytes of the kept chunks' commit inputs held for a recache (at most
  // sink - 1 + window chunks).
  int64_t recache_bytes() const;

 private:
  // One chunk's part of the contract's draws: its initial noise and the clean eps of its commit.
  struct ChunkDraws {
    at::Tensor noise_v, noise_a, clean_v, clean_a;
  };
  // The chunk delivered last, until its commit forward.
  struct Pending {
    ChunkSpan span;
    at::Tensor x0_v, x0_a, clean_v, clean_a;
    int64_t shift = 0;  // the chunks its positions were moved back by
  };
  // recache_on_switch: a retained chunk record's commit input (t x0 + (1 - t) eps_clean, fp32),
  // to run its commit forward again under a new prompt.
  struct Kept {
    int64_t record = 0;
    ChunkSpan span;
    at::Tensor video, audio;  // [1, C, t_c, h, w] and audio rows [2 a_c, 32]
  };

  at::Tensor draw(at::IntArrayRef shape);  // the next draw of the contract, the same on every rank
  void commit_previous();
  void recache();  // the kept chunks' records again, under the prompt record 0 now holds
  // The chunk's steps from its initial noise; false when a step callback asked for it to be made
  // again (remake_with_text), the chunk's x0 in xv / xa otherwise.
  bool run_steps(const ChunkSpan& sp, at::Tensor& xv, at::Tensor& xa, const CausalStepCallback& on_step);

  const Transformer& model_;
  CausalRequest req_;
  std::vector<ChunkSpan> spans_;
  std::vector<double> sigma_v_, sigma_a_;
  KvCache cache_;
  std::optional<at::Generator> gen_;  // rank 0 only
  // A finite clip's whole-clip draws, cut per chunk: each is released once used.
  std::vector<ChunkDraws> draws_;
  Pending pending_;
  at::Tensor pending_text_, pending_tags_;  // a prompt change waiting for the next chunk
  bool remake_ = false;                     // remake_with_text: the chunk in the making begins again
  int64_t origin_ = 0;                      // the media clock's origin: the first prompt's length
  int64_t anchor_ = 0;                      // relative positions: see anchor()
  int64_t shift_ = 0;                       // relative positions: the window's shift, in chunks
  std::vector<Kept> kept_;                  // recache_on_switch: the retained chunk records' inputs
  int64_t next_ = 0;
  int64_t forwards_ = 0;
};

}  // namespace h3::dit
