#include "engine/stages/stage_causal.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/cpu_block_cache.h"
#include "dit/consistency_sampler.h"
#include "dit/frames.h"
#include "engine/stages/stage_conditioning.h"
#include "engine/stages/stage_decode.h"
#include "engine/stages/stage_denoise.h"
#include "h3/error.h"

namespace h3::engine_detail {
namespace {

// The chunks whose block sizes the CPU block cache keeps for the next (common/cpu_block_cache.h):
// a record's rows follow its chunk's 28 or 29 audio latents, so the cache's rows, and the sizes
// a chunk asks for, repeat every 3 chunks; one more for margin.
constexpr int64_t kBlockCacheChunks = 4;

// The sampler's chunks as the decode and the soundtrack read them. Keeps only the latents a
// later clip may still ask for (the decode never goes back before the first index it asked
// for) and the audio latents the audio decoder may still read.
class CausalLatents : public vae::LatentSource, public AudioLatents {
 public:
  CausalLatents(const StageContext& c, const Job& job, dit::CausalSampler& sampler, int64_t c_in, int64_t h,
                int64_t w, bool keep_all)
      : c_(c), job_(job), sampler_(sampler), keep_all_(keep_all) {
    shape_ = {1, c_in, c.plan.latent_frames, h, w};
  }

  std::vector<int64_t> shape() const override { return shape_; }

  at::Tensor select(const std::vector<int64_t>& t) override {
    const int64_t need = *std::max_element(t.begin(), t.end()) + 1;
    while (video_end_ < need) run_chunk();
    // Drop what no later clip reads.
    const int64_t first = *std::min_element(t.begin(), t.end());
    if (!keep_all_ && first > video_begin_) {
      video_ = video_.narrow(2, first - video_begin_, video_end_ - first).clone();
      video_begin_ = first;
    }
    std::vector<int64_t> local;
    for (int64_t i : t) local.push_back(i - video_begin_);
    return video_.index_select(2, at::tensor(local, at::TensorOptions().dtype(at::kLong)));
  }

  int64_t total() const override { return c_.plan.audio_latents; }
  int64_t available() const override { return audio_end_; }
  at::Tensor rows(int64_t begin, int64_t end) const override {
    const at::Tensor z = audio_.narrow(3, begin - audio_begin_, end - begin);  // [1, C, 2, n]
    return dit::audio_rows_of(z);
  }
  void release_before(int64_t latent) override {
    if (keep_all_ || latent <= audio_begin_) return;
    audio_ = audio_.narrow(3, latent - audio_begin_, audio_end_ - latent).clone();
    audio_begin_ = latent;
  }

  // The whole clip (keep_all only).
  at::Tensor video() const { return video_; }
  at::Tensor audio_rows() const { return dit::audio_rows_of(audio_).contiguous(); }

 private:
  // Before each chunk, agreed by every rank: whether the caller ended an endless stream, and a
  // new prompt from this chunk on (rank 0 decides, every rank encodes it with the text encoder's
  // shards). Several changes due at one boundary (docs/causal.md "Live"): among the timeline's
  // entries the latest due wins, among live changes the latest due (then the latest given), and
  // a live change wins over the timeline's entries: it is what the person watching asked for just
  // now, the timeline what was written before. The losers are dropped, not deferred.
  void boundary() {
    const int64_t next = sampler_.next_index();
    if (c_.plan.endless && dist::agree_cancel(c_.group, c_.root() && c_.cancel.finish_requested())) {
      throw StreamEnd{};
    }
    std::string prompt;
    if (c_.root()) {
      const auto& timeline = job_.request.prompt_timeline;
      const double starts = dit::chunk_start_seconds(next);
      while (timeline_next_ < timeline.size() && timeline[timeline_next_].seconds <= starts + 1e-9) {
        prompt = timeline[timeline_next_++].prompt;
      }
      if (auto live = c_.cancel.take_prompt(starts)) prompt = *live;
    }
    prompt = c_.group.broadcast_string(prompt, 0);
    change_steps(next);
    if (!prompt.empty()) apply_prompt(prompt, next, false);
  }

  // Inside a chunk, after each of its forwards but the last: a live change given since the chunk
  // began (rank 0 takes it, every rank gets it) remakes the chunk under it, at most once a chunk,
  // instead of waiting for the next chunk (docs/causal.md "Live"): a change shows a chunk sooner
  // for at most the forwards already run. After the last forward the chunk is made and its
  // decode may be reading it: a change then waits for the next boundary as before.
  bool remake_for_live_change(int64_t chunk) {
    std::string prompt;
    if (c_.root()) {
      if (auto live = c_.cancel.take_prompt(dit::chunk_start_seconds(chunk))) prompt = *live;
    }
    prompt = c_.group.broadcast_string(prompt, 0);
    if (prompt.empty()) return false;
    apply_prompt(prompt, chunk, true);
    return true;
  }

  // Every rank encodes the new prompt (the text encoder's shards) for chunk `chunk` on; rank 0
  // reports it taken.
  void apply_prompt(const std::string& prompt, int64_t chunk, bool remake) {
    GenerationRequest r = job_.request;
    r.prompt = prompt;
    r.embeds_path.clear();
    const text::Conditioning cond = conditioning_stage(c_, r, job_.free_text_encoder);
    if (remake) {
      sampler_.remake_with_text(cond.embeds, cond.tags);
    } else {
      sampler_.change_text(cond.embeds, cond.tags);
    }
    if (c_.root()) {
      Event e = c_.progress_event(Phase::kPrompt, 0, 0, chunk, dit::chunk_first_frame(chunk));
      e.progress.prompt = prompt;
      c_.mailbox.post(std::move(e));
    }
  }

  // A live step change (StreamControl::change_steps) from chunk `next` on: rank 0 takes it and
  // keeps it within [min_steps, steps] (the grids the AdaLN tables hold), every rank applies what
  // it broadcasts, so that all run the same grid.
  void change_steps(int64_t next) {
    int64_t steps = 0;
    if (c_.root()) {
      if (const int64_t asked = c_.cancel.take_steps(); asked != 0) {
        steps = std::clamp(asked, c_.plan.min_steps > 0 ? c_.plan.min_steps : c_.plan.steps, c_.plan.steps);
      }
    }
    steps = c_.group.broadcast_int(steps, 0);
    if (steps == 0 || steps == sampler_.steps()) return;
    sampler_.change_steps(steps);
    if (c_.root()) {
      Event e = c_.progress_event(Phase::kSteps, 0, 0, next, dit::chunk_first_frame(next));
      e.progress.chunk_steps = steps;
      c_.mailbox.post(std::move(e));
    }
  }

  void run_chunk() {
    boundary();
    const int64_t steps = sampler_.steps();  // this chunk's: a live change may have set them
    const int64_t chunks = sampler_.chunks();
    int64_t index = sampler_.next_index();
    // The noise forwards left, at this chunk's count (-1: endless).
    const int64_t total = chunks < 0 ? -1 : forwards_done_ + (chunks - index) * steps;
    // "chunk 3 of 5" (1-based), or "chunk 3" of an endless stream.
    const auto chunk_name = [&](int64_t i) {
      return "chunk " + std::to_string(i + 1) +
             (chunks > 0 ? " of " + std::to_string(chunks) : std::string());
    };
    // The forwards a remake ran again: the step reports go on counting up.
    int64_t redone = 0;
    bool remade = false;
    auto on_step = [&](const dit::ChunkSpan& s, int64_t k, int64_t, const at::Tensor&, const at::Tensor&) {
      index = s.index;
      c_.report_step(forwards_done_ + redone + k + 1, total < 0 ? total : total + redone);
      if (c_.agreed_cancel()) {
        throw Error(ErrorKind::kCancelled, "cancelled during denoising (" + chunk_name(s.index) +
                                               ", after step " + std::to_string(k + 1) + " of " +
                                               std::to_string(steps) + ")");
      }
      if (!remade && k + 1 < steps && remake_for_live_change(s.index)) {
        remade = true;
        redone += k + 1;
      }
    };
    dit::CausalChunk chunk;
    try {
      // A chunk's forwards ask for the blocks the last chunk's did, and an evicted KV record's
      // block serves the next one (common/cpu_block_cache.h); the decode in between does not
      // use the cache.
      const CpuBlockCacheScope reuse;
      chunk = sampler_.next(on_step);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kCancelled) throw;  // agreed: every rank throws it at the same step
      // This rank alone, between collectives: tell the peers now, not at their timeout.
      const std::string what = "causal " + chunk_name(index) + ": " + e.what();
      c_.group.report_failure(what);
      throw Error(e.kind(), what);
    } catch (const std::exception& e) {
      const std::string what = "causal " + chunk_name(index) + ": " + e.what();
      c_.group.report_failure(what);
      throw Error(ErrorKind::kInternal, what);
    }
    forwards_done_ += steps + redone;
    // The blocks kept for sizes the last chunks no longer asked for go back: a prompt of another
    // length changes the cache's rows and so every attention's sizes, and an endless stream never
    // reaches the end of the phase that would release them. Every rank of this process ends an
    // interval here (thread ranks share the process's cache), so the sizes of the last
    // kBlockCacheChunks chunks stay at least.
    trim_cpu_block_cache(kBlockCacheChunks * c_.group.size());
    video_ = video_.defined() ? at::cat({video_, chunk.video}, 2) : chunk.video;
    if (job_.request.audio || keep_all_) {
      const at::Tensor audio = dit::audio_latent_of(chunk.audio);
      audio_ = audio_.defined() ? at::cat({audio_, audio}, 3) : audio;
    } else {
      audio_begin_ = chunk.span.audio_end;  // nobody reads the audio latents: none are kept
    }
    video_end_ = chunk.span.video_end;
    audio_end_ = chunk.span.audio_end;
    if (c_.root()) report_held(chunk.span.index);
  }

  // Rank 0: what this chunk left held (h3/causal_held.h), to the caller's observer.
  void report_held(int64_t index) const {
    const dit::KvCache& kv = sampler_.cache();
    Event e{Event::Kind::kCausalHeld};
    e.held.chunk = index;
    e.held.kv_records = static_cast<int64_t>(kv.records().size());
    e.held.kv_rows = kv.rows();
    e.held.kv_bytes = kv.bytes();
    e.held.video_latents = video_end_ - video_begin_;
    e.held.audio_latents = audio_end_ - audio_begin_;
    e.held.latent_bytes = (video_.defined() ? static_cast<int64_t>(video_.nbytes()) : 0) +
                          (audio_.defined() ? static_cast<int64_t>(audio_.nbytes()) : 0);
    e.held.position_shift = sampler_.position_shift();
    e.held.recache_bytes = sampler_.recache_bytes();
    const CpuBlockCacheStats blocks = cpu_block_cache_stats();
    e.held.cached_block_bytes = blocks.kept_bytes;
    e.held.cached_block_sizes = blocks.sizes;
    c_.mailbox.post(std::move(e));
  }

  const StageContext& c_;
  const Job& job_;
  dit::CausalSampler& sampler_;
  size_t timeline_next_ = 0;   // rank 0: the timeline's next entry
  int64_t forwards_done_ = 0;  // noise forwards of the chunks made so far (for the step reports)
  const bool keep_all_;
  std::vector<int64_t> shape_;
  at::Tensor video_, audio_;  // latents [video_begin_, video_end_) and [audio_begin_, audio_end_)
  int64_t video_begin_ = 0, video_end_ = 0, audio_begin_ = 0, audio_end_ = 0;
};

}  // namespace

void causal_stage(const StageContext& c, const Job& job, const text::Conditioning& cond) {
  const ClipPlan& p = c.plan;
  dit::CausalRequest r;
  r.text = cond.embeds;
  r.text_tags = cond.tags;
  r.seed = job.request.seed;
  r.video_latents = p.latent_frames;
  r.latent_h = p.canvas_height / dit::kVaeSpatialRatio;
  r.latent_w = p.canvas_width / dit::kVaeSpatialRatio;
  r.audio_latents = p.audio_latents;
  r.settings.steps = p.steps;
  r.settings.sink = job.request.sink;
  r.settings.window = job.request.window < 0 ? std::nullopt : std::optional<int64_t>(job.request.window);
  r.settings.video_shift = p.video_shift;
  r.settings.audio_shift = p.audio_shift;
  r.endless = p.endless;
  // Relative positions keep the stream within the positions of a clip of the model's default
  // length (docs/causal.md "Positions"); auto: on for an endless stream, off for a clip.
  const CausalPositions positions = job.request.positions;
  r.settings.relative_positions =
      positions == CausalPositions::kRelative || (positions == CausalPositions::kAuto && p.endless);
  r.settings.trained_chunks = dit::clip_chunks(c.model.defaults.num_frames);
  r.settings.recache_on_switch = job.request.prompt_switch == PromptSwitch::kRecache;
  dit::check_causal_settings(r.settings);
  // Every grid a live step change may ask for (min_steps..steps), so that none reads the AdaLN
  // projections again in the middle of a stream.
  adaln_stage(c, job, dit::causal_timesteps(r.settings, p.min_steps));
  // The sampler's draws and its prefill are collectives: every rank builds it here.
  dit::CausalSampler sampler(*c.parts.dit, r);
  CausalLatents latents(c, job, sampler, c.model.dit.in_channels, r.latent_h, r.latent_w,
                        job.want_latents && !p.endless);
  decode_stage(c, latents, job.request.audio ? &latents : nullptr);
  if (job.want_latents && !p.endless) {
    dist::LocalFailure f;
    c.group.run_on_owner(
        0,
        [&] {
          if (!c.root()) return;
          Event e{Event::Kind::kLatents};
          e.video = latents.video().contiguous();
          e.audio = latents.audio_rows();
          f.set(c.mailbox.call(std::move(e)));
        },
        "waiting for rank 0 to hand the latents to the observer");
    dist::agree_or_throw(c.group, f);
  }
}

}  // namespace h3::engine_detail
