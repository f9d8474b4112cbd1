#include "dit/consistency_sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <string>

#include "common/error.h"
#include "dist/group.h"

namespace h3::dit {
namespace {

[[noreturn]] void bad(const std::string& what) {
  throw Error(ErrorKind::kInvalidArgument, what);
}

// Each chunk's part of a whole-clip tensor along `dim`, owned, so that it can be released alone.
std::vector<at::Tensor> cut(const at::Tensor& whole, int64_t dim, const std::vector<ChunkSpan>& spans,
                            bool video) {
  std::vector<at::Tensor> out;
  for (const auto& s : spans) {
    out.push_back(video ? whole.narrow(dim, s.video_begin, s.video_latents()).clone()
                        : whole.narrow(dim, s.audio_begin, s.audio_latents()).clone());
  }
  return out;
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
}

std::vector<double> consistency_sigmas(int64_t steps, double shift) {
  std::vector<double> out;
  for (int64_t i = 0; i < steps; ++i) {
    const double u = 1.0 - static_cast<double>(i) / static_cast<double>(steps);
    out.push_back(shift * u / (1.0 + (shift - 1.0) * u));
  }
  return out;
}

CausalSampler::CausalSampler(const Transformer& model, CausalRequest request)
    : model_(model),
      req_(std::move(request)),
      cache_(model.config().num_layers, req_.settings.sink, req_.settings.window) {
  const auto& c = model_.config();
  check_causal_settings(req_.settings);
  spans_ = cut_chunks(req_.video_latents, req_.audio_latents);
  if (req_.latent_h < 1 || req_.latent_w < 1 || req_.latent_h % c.patch[1] != 0 ||
      req_.latent_w % c.patch[2] != 0) {
    bad("chunk-causal sampling: a " + std::to_string(req_.latent_h) + "x" + std::to_string(req_.latent_w) +
        " latent canvas: height and width must be positive multiples of the patch");
  }
  sigma_v_ = consistency_sigmas(req_.settings.steps, req_.settings.video_shift);
  sigma_a_ = consistency_sigmas(req_.settings.steps, req_.settings.audio_shift);
  const dist::Group* g = model_.tp().group();
  if (g == nullptr || g->rank() == 0) gen_ = at::make_generator<at::CPUGeneratorImpl>(req_.seed);

  const std::vector<int64_t> vshape{1, c.in_channels, req_.video_latents, req_.latent_h, req_.latent_w};
  const std::vector<int64_t> ashape{1, c.audio_in_channels, 2, req_.audio_latents};
  // The whole clip's four draws, in the contract's order, before any forward; each is cut per
  // chunk before the next is drawn, so that only one whole-clip tensor exists at a time.
  noise_v_ = cut(draw(vshape), 2, spans_, true);
  noise_a_ = cut(draw(ashape), 3, spans_, false);
  clean_v_ = cut(draw(vshape), 2, spans_, true);
  clean_a_ = cut(draw(ashape), 3, spans_, false);
  prefill_text(model_, req_.text, req_.text_tags, cache_);
  ++forwards_;
}

at::Tensor CausalSampler::draw(at::IntArrayRef shape) {
  at::Tensor t = gen_ ? at::randn(shape, *gen_, at::TensorOptions().dtype(at::kFloat))
                      : at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  if (dist::Group* g = model_.tp().group(); g != nullptr && g->size() > 1) g->broadcast(t, 0);
  return t;
}

void CausalSampler::commit_previous() {
  if (!pending_v_.defined()) return;
  const int64_t prev = next_ - 1;
  const auto i = static_cast<size_t>(prev);
  if (cache_.retains_next()) {
    // The clean forward's rows: t x0 + (1 - t) eps at t = 0.999, in fp32 (1 - t as the fp32
    // subtraction, as the reference computes it).
    const float t = kCleanTimestep, rest = 1.0f - kCleanTimestep;
    ChunkInputs in;
    in.span = spans_[i];
    in.text_rows = req_.text.size(0);
    in.video = pending_v_.mul(t).add(clean_v_[i].mul(rest));
    in.audio = audio_rows_of(pending_a_.mul(t).add(clean_a_[i].mul(rest)));
    in.t_video = in.t_audio = t;
    forward_chunk(model_, in, cache_, ChunkPass::kCommit);
    ++forwards_;
  } else {
    cache_.commit_dropped();  // window 0: the record would be evicted at once
  }
  clean_v_[i] = clean_a_[i] = at::Tensor();
  pending_v_ = pending_a_ = at::Tensor();
}

CausalChunk CausalSampler::next(const CausalStepCallback& on_step) {
  if (done()) throw Error(ErrorKind::kInternal, "causal sampler: every chunk was delivered");
  commit_previous();
  const auto i = static_cast<size_t>(next_);
  const ChunkSpan& span = spans_[i];
  at::Tensor xv = std::move(noise_v_[i]), xa = std::move(noise_a_[i]);
  const int64_t n = req_.settings.steps;
  for (int64_t k = 0; k < n; ++k) {
    ChunkInputs in;
    in.span = span;
    in.text_rows = req_.text.size(0);
    in.video = xv;
    in.audio = audio_rows_of(xa);
    in.t_video = timestep_of(sigma_v_[static_cast<size_t>(k)]);
    in.t_audio = timestep_of(sigma_a_[static_cast<size_t>(k)]);
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
    if (on_step) on_step(span, k, n, x0v, x0a);
    if (k + 1 == n) {
      // The last step's x0 is the chunk (the update to sigma 0 gives it back exactly).
      xv = x0v;
      xa = x0a;
    }
  }
  CausalChunk out;
  out.span = span;
  out.video = xv;
  out.audio = audio_rows_of(xa).contiguous();
  ++next_;
  out.last = done();
  if (!out.last) {
    pending_v_ = xv;
    pending_a_ = xa;
  }
  return out;
}

}  // namespace h3::dit
