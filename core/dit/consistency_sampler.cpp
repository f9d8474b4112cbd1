#include "dit/consistency_sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "dist/group.h"
#include "h3/error.h"

namespace h3::dit {
namespace {

[[noreturn]] void bad(const std::string& what) {
  throw Error(ErrorKind::kInvalidArgument, what);
}

// The model's timestep of a noise forward: t = 1 - sigma, sigma rounded to fp32 first.
float timestep_of(double sigma) {
  return 1.0f - static_cast<float>(sigma);
}

}  // namespace

void check_causal_settings(const CausalSettings& s) {
  if (s.steps < 1)
    bad("steps = " + std::to_string(s.steps) + ": the causal sampler needs at least 1 step per chunk");
  for (auto [name, v] :
       {std::pair<const char*, double>{"video-shift", s.video_shift}, {"audio-shift", s.audio_shift}}) {
    if (!std::isfinite(v) || v <= 0)
      bad(std::string(name) + " = " + std::to_string(v) + ": must be a positive number");
  }
  if (s.sink < 1) {
    bad("sink = " + std::to_string(s.sink) +
        ": at least 1 (the text is the first pinned record of the KV cache; 2 also pins the first chunk)");
  }
  if (s.window && *s.window < 0) {
    bad("window = " + std::to_string(*s.window) + ": 0 or more recent chunks, or -1 for no eviction");
  }
  if (s.relative_positions && !s.window) {
    bad("positions = relative needs a window: it moves the window's chunks back as the clip advances, "
        "and window = -1 keeps every chunk; give a window of 0 or more, or positions = absolute");
  }
  if (s.relative_positions && s.trained_chunks < 2) {
    bad("positions = relative: the trained length is " + std::to_string(s.trained_chunks) +
        " chunks; at least 2 (a whole chunk and the tail)");
  }
}

std::vector<double> consistency_sigmas(int64_t steps, double shift) {
  std::vector<double> out;
  for (int64_t i = 0; i < steps; ++i) {
    const double u = 1.0 - static_cast<double>(i) / static_cast<double>(steps);
    out.push_back(shift * u / (1.0 + (shift - 1.0) * u));
  }
  return out;
}

std::vector<TimestepSet> causal_timesteps(const CausalSettings& s) {
  const auto sv = consistency_sigmas(s.steps, s.video_shift), sa = consistency_sigmas(s.steps, s.audio_shift);
  std::vector<TimestepSet> sets{{kCleanTimestep}};
  for (size_t k = 0; k < sv.size(); ++k) sets.push_back(timestep_set(timestep_of(sv[k]), timestep_of(sa[k])));
  return sets;
}

std::vector<TimestepSet> causal_timesteps(const CausalSettings& s, int64_t min_steps) {
  std::vector<TimestepSet> sets;
  for (int64_t n = min_steps > 0 ? min_steps : s.steps; n <= s.steps; ++n) {
    CausalSettings at = s;
    at.steps = n;
    for (TimestepSet& t : causal_timesteps(at)) {
      if (std::find(sets.begin(), sets.end(), t) == sets.end()) sets.push_back(std::move(t));
    }
  }
  return sets;
}

CausalSampler::CausalSampler(const Transformer& model, CausalRequest request)
    : model_(model),
      req_(std::move(request)),
      cache_(model.config().num_layers, req_.settings.sink, req_.settings.window) {
  const auto& c = model_.config();
  check_causal_settings(req_.settings);
  if (!req_.endless) spans_ = cut_chunks(req_.video_latents, req_.audio_latents);
  if (req_.latent_h < 1 || req_.latent_w < 1 || req_.latent_h % c.patch[1] != 0 ||
      req_.latent_w % c.patch[2] != 0) {
    bad("chunk-causal sampling: a " + std::to_string(req_.latent_h) + "x" + std::to_string(req_.latent_w) +
        " latent canvas: height and width must be positive multiples of the patch");
  }
  sigma_v_ = consistency_sigmas(req_.settings.steps, req_.settings.video_shift);
  sigma_a_ = consistency_sigmas(req_.settings.steps, req_.settings.audio_shift);
  const dist::Group* g = model_.tp().group();
  if (g == nullptr || g->rank() == 0) gen_ = at::make_generator<at::CPUGeneratorImpl>(req_.seed);

  if (!req_.endless) {
    // The whole clip's four draws, in the contract's order, before any forward; each is cut per
    // chunk before the next is drawn, so that only one whole-clip tensor exists at a time.
    const std::vector<int64_t> vshape{1, c.in_channels, req_.video_latents, req_.latent_h, req_.latent_w};
    const std::vector<int64_t> ashape{1, c.audio_in_channels, 2, req_.audio_latents};
    draws_.resize(spans_.size());
    auto cut = [&](const at::Tensor& whole, at::Tensor ChunkDraws::*field, bool video) {
      for (size_t k = 0; k < spans_.size(); ++k) {
        const ChunkSpan& sp = spans_[k];
        draws_[k].*field = video ? whole.narrow(2, sp.video_begin, sp.video_latents()).clone()
                                 : whole.narrow(3, sp.audio_begin, sp.audio_latents()).clone();
      }
    };
    cut(draw(vshape), &ChunkDraws::noise_v, true);
    cut(draw(ashape), &ChunkDraws::noise_a, false);
    cut(draw(vshape), &ChunkDraws::clean_v, true);
    cut(draw(ashape), &ChunkDraws::clean_a, false);
  }
  origin_ = req_.text.size(0);
  if (req_.settings.relative_positions) {
    anchor_ = relative_anchor(req_.settings.trained_chunks);
  }
  prefill_text(model_, req_.text, req_.text_tags, cache_);
  ++forwards_;
}

ChunkSpan CausalSampler::span(int64_t chunk) const {
  return req_.endless ? full_chunk(chunk) : spans_[static_cast<size_t>(chunk)];
}

int64_t CausalSampler::chunks() const {
  return req_.endless ? -1 : static_cast<int64_t>(spans_.size());
}

at::Tensor CausalSampler::draw(at::IntArrayRef shape) {
  at::Tensor t = gen_ ? at::randn(shape, *gen_, at::TensorOptions().dtype(at::kFloat))
                      : at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  if (dist::Group* g = model_.tp().group(); g != nullptr && g->size() > 1) g->broadcast(t, 0);
  return t;
}

void CausalSampler::change_text(at::Tensor text, at::Tensor text_tags) {
  pending_text_ = std::move(text);
  pending_tags_ = std::move(text_tags);
}

void CausalSampler::remake_with_text(at::Tensor text, at::Tensor text_tags) {
  change_text(std::move(text), std::move(text_tags));
  remake_ = true;
}

void CausalSampler::change_steps(int64_t steps) {
  CausalSettings s = req_.settings;
  s.steps = steps;
  check_causal_settings(s);
  req_.settings.steps = steps;
  sigma_v_ = consistency_sigmas(steps, req_.settings.video_shift);
  sigma_a_ = consistency_sigmas(steps, req_.settings.audio_shift);
}

int64_t CausalSampler::recache_bytes() const {
  int64_t b = 0;
  for (const Kept& k : kept_) b += static_cast<int64_t>(k.video.nbytes() + k.audio.nbytes());
  return b;
}

void CausalSampler::commit_previous() {
  if (!pending_.x0_v.defined()) return;
  if (cache_.retains_next()) {
    // The clean forward's rows: t x0 + (1 - t) eps at t = 0.999, in fp32 (1 - t as the fp32
    // subtraction, as the reference computes it).
    const float t = kCleanTimestep, rest = 1.0f - kCleanTimestep;
    ChunkInputs in;
    in.span = pending_.span;
    in.text_rows = origin_;
    in.video = pending_.x0_v.mul(t).add(pending_.clean_v.mul(rest));
    in.audio = audio_rows_of(pending_.x0_a.mul(t).add(pending_.clean_a.mul(rest)));
    in.t_video = in.t_audio = t;
    in.position_shift = pending_.shift;
    const int64_t record = cache_.committed();
    forward_chunk(model_, in, cache_, ChunkPass::kCommit);
    ++forwards_;
    if (req_.settings.recache_on_switch) {
      // Its input stays beside the cache as long as its record does.
      kept_.push_back(Kept{record, in.span, in.video, in.audio});
      const auto& retained = cache_.records();
      std::vector<Kept> still;
      for (Kept& k : kept_) {
        if (std::find(retained.begin(), retained.end(), k.record) != retained.end())
          still.push_back(std::move(k));
      }
      kept_ = std::move(still);
    }
  } else {
    cache_.commit_dropped();  // window 0: the record would be evicted at once
  }
  pending_ = Pending{};
}

void CausalSampler::recache() {
  // Which records the cache keeps past the prompt, and the inputs kept for them: the same list.
  const auto& retained = cache_.records();
  if (kept_.size() + 1 != retained.size()) {
    throw Error(ErrorKind::kInternal, "causal sampler: " + std::to_string(kept_.size()) +
                                          " commit inputs kept for " + std::to_string(retained.size() - 1) +
                                          " retained chunk records");
  }
  if (kept_.empty()) return;  // only the prompt (window 0, sink 1): nothing to recompute
  // Rebuilt in a cache of its own that evicts nothing, starting from the new prompt's record: each
  // chunk's commit forward attends the new prompt and the records rebuilt before it, at the
  // positions its record holds now (the sink's its own, the window's moved back by shift_).
  KvCache rebuilt(cache_.layers(), 1, std::nullopt);
  std::vector<at::Tensor> k0, v0;
  const int64_t prompt_rows = cache_.record_rows().front();
  for (int64_t l = 0; l < cache_.layers(); ++l) {
    k0.push_back(cache_.keys(l).narrow(0, 0, prompt_rows));
    v0.push_back(cache_.values(l).narrow(0, 0, prompt_rows));
  }
  rebuilt.commit(std::move(k0), std::move(v0));
  for (size_t i = 0; i < kept_.size(); ++i) {
    const Kept& k = kept_[i];
    if (k.record != retained[i + 1]) {
      throw Error(ErrorKind::kInternal, "causal sampler: the commit input of record " +
                                            std::to_string(k.record) + " kept for record " +
                                            std::to_string(retained[i + 1]));
    }
    ChunkInputs in;
    in.span = k.span;
    in.text_rows = origin_;
    in.video = k.video;
    in.audio = k.audio;
    in.t_video = in.t_audio = kCleanTimestep;
    in.position_shift = k.record < req_.settings.sink ? 0 : shift_;
    forward_chunk(model_, in, rebuilt, ChunkPass::kCommit);
    ++forwards_;
  }
  cache_.take_keys_values(std::move(rebuilt));
}

bool CausalSampler::run_steps(const ChunkSpan& sp, at::Tensor& xv, at::Tensor& xa,
                              const CausalStepCallback& on_step) {
  const int64_t n = req_.settings.steps;
  for (int64_t k = 0; k < n; ++k) {
    ChunkInputs in;
    in.span = sp;
    in.text_rows = origin_;
    in.video = xv;
    in.audio = audio_rows_of(xa);
    in.t_video = timestep_of(sigma_v_[static_cast<size_t>(k)]);
    in.t_audio = timestep_of(sigma_a_[static_cast<size_t>(k)]);
    in.position_shift = shift_;
    const Velocity v = forward_chunk(model_, in, cache_, ChunkPass::kNoise);
    ++forwards_;
    // x0 = x_t + sigma v (v = x0 - eps, the model's native velocity), each coefficient in fp32.
    auto x0v = xv.add(v.video.to(at::kCPU).mul(static_cast<float>(sigma_v_[static_cast<size_t>(k)])));
    auto x0a = xa.add(
        audio_latent_of(v.audio.to(at::kCPU)).mul(static_cast<float>(sigma_a_[static_cast<size_t>(k)])));
    // Fresh noise every step, drawn also when the next sigma is 0 (the contract counts it).
    auto ev = draw(xv.sizes()), ea = draw(xa.sizes());
    const double nv = k + 1 < n ? sigma_v_[static_cast<size_t>(k + 1)] : 0.0;
    const double na = k + 1 < n ? sigma_a_[static_cast<size_t>(k + 1)] : 0.0;
    xv = x0v.mul(static_cast<float>(1.0 - nv)).add(ev.mul(static_cast<float>(nv)));
    xa = x0a.mul(static_cast<float>(1.0 - na)).add(ea.mul(static_cast<float>(na)));
    if (on_step) on_step(sp, k, n, x0v, x0a);
    if (remake_) {
      remake_ = false;
      return false;
    }
    if (k + 1 == n) {
      // The last step's x0 is the chunk (the update to sigma 0 gives it back exactly).
      xv = x0v;
      xa = x0a;
    }
  }
  return true;
}

CausalChunk CausalSampler::next(const CausalStepCallback& on_step) {
  if (done()) throw Error(ErrorKind::kInternal, "causal sampler: every chunk was delivered");
  commit_previous();
  const ChunkSpan sp = span(next_);
  if (req_.settings.relative_positions) {
    // Past the trained length the window and this chunk move back (in steps of 3 chunks): the
    // cache's window keys turn by the step, the sink's and the prompt's stay.
    const bool tail = !req_.endless && sp.video_latents() == kTailLatents;
    const int64_t shift = relative_shift(sp.index, tail, req_.settings.trained_chunks, anchor_);
    if (shift > shift_) {
      move_window_back(model_, cache_, shift - shift_);
      shift_ = shift;
    }
  }
  // The generator where it stands at the chunk's start, and a finite clip's draws for it: what a
  // remake (remake_with_text) starts from again.
  at::Generator at_start;  // undefined on the ranks that draw nothing
  if (gen_) at_start = gen_->clone();
  const ChunkDraws drawn = req_.endless ? ChunkDraws{} : std::move(draws_[static_cast<size_t>(next_)]);
  ChunkDraws d;
  at::Tensor xv, xa;
  for (;;) {
    if (pending_text_.defined()) {
      // A new prompt from this chunk on: its prefill takes the cache's first record; the chunks
      // the cache keeps (and the media clock's origin) stay, so the motion carries on; recache:
      // their records are recomputed under the new prompt.
      prefill_text(model_, pending_text_, pending_tags_, cache_);
      ++forwards_;
      pending_text_ = pending_tags_ = at::Tensor();
      if (req_.settings.recache_on_switch) recache();
    }
    if (req_.endless) {
      // The stream's contract: the chunk's own four draws at its start, then its steps' draws.
      const auto& c = model_.config();
      d.noise_v = draw({1, c.in_channels, sp.video_latents(), req_.latent_h, req_.latent_w});
      d.noise_a = draw({1, c.audio_in_channels, 2, sp.audio_latents()});
      d.clean_v = draw({1, c.in_channels, sp.video_latents(), req_.latent_h, req_.latent_w});
      d.clean_a = draw({1, c.audio_in_channels, 2, sp.audio_latents()});
    } else {
      d = drawn;  // the same tensors: nothing below writes into them
    }
    xv = d.noise_v;
    xa = d.noise_a;
    if (run_steps(sp, xv, xa, on_step)) break;
    if (at_start.defined()) gen_ = at_start.clone();
  }
  CausalChunk out;
  out.span = sp;
  out.video = xv;
  out.audio = audio_rows_of(xa).contiguous();
  ++next_;
  out.last = done();
  if (!out.last) pending_ = Pending{sp, xv, xa, std::move(d.clean_v), std::move(d.clean_a), shift_};
  return out;
}

}  // namespace h3::dit
