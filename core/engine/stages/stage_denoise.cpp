#include "engine/stages/stage_denoise.h"

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "common/cpu_block_cache.h"
#include "dit/frames.h"
#include "dit/sampler.h"
#include "h3/error.h"

namespace h3::engine_detail {
namespace {

// One CPU generator seeded with the request's seed, drawn on rank 0: the condition blocks' noise
// (FL2VA's keyframes, Ref2VA's references; each of its latent's shape), then the video, then the
// audio.
dit::Latents shared_noise(const StageContext& c, uint64_t seed, std::vector<at::Tensor>& keyframe_noise,
                          const std::vector<at::Tensor>& keyframes) {
  const ClipPlan& p = c.plan;
  const int64_t h = p.canvas_height / dit::kVaeSpatialRatio, w = p.canvas_width / dit::kVaeSpatialRatio;
  const std::vector<int64_t> vshape{1, c.model.dit.in_channels, p.latent_frames, h, w};
  const std::vector<int64_t> ashape{2 * p.audio_latents, c.model.dit.audio_in_channels};
  std::vector<std::vector<int64_t>> kshapes;
  for (const at::Tensor& k : keyframes) kshapes.push_back(k.sizes().vec());
  dit::Latents noise;
  if (c.root()) {
    noise = dit::draw_noise(seed, vshape, ashape, kshapes, keyframe_noise);
  } else {
    noise.video = at::empty(vshape, at::kFloat);
    noise.audio = at::empty(ashape, at::kFloat);
    keyframe_noise.clear();
    for (const auto& shape : kshapes) keyframe_noise.push_back(at::empty(shape, at::kFloat));
  }
  for (auto& n : keyframe_noise) c.group.broadcast(n, 0);
  c.group.broadcast(noise.video, 0);
  c.group.broadcast(noise.audio, 0);
  return noise;
}

dit::Latents run_steps(const StageContext& c, const dit::DenoiseRequest& dr) {
  auto on_step = [&](int64_t i, int64_t n, const dit::Latents&) {
    c.report_step(i + 1, n);
    if (c.agreed_cancel()) {
      throw Error(ErrorKind::kCancelled, "cancelled during denoising (after step " + std::to_string(i + 1) +
                                             " of " + std::to_string(n) + ")");
    }
  };
  try {
    return dit::denoise(*c.parts.dit, dr, on_step);
  } catch (const Error& e) {
    // A cancel is agreed (every rank throws it at the same step); anything else happened on
    // this rank alone, between collectives: tell the peers now instead of at their timeout.
    if (e.kind() != ErrorKind::kCancelled) c.group.report_failure(e.what());
    throw;
  } catch (const std::exception& e) {
    c.group.report_failure(e.what());
    throw;
  }
}

// The observer is the caller's code and may take any time: the peers wait for rank 0
// without the collective timeout while it runs.
void hand_over_latents(const StageContext& c, const dit::Latents& x) {
  dist::LocalFailure f;
  c.group.run_on_owner(
      0,
      [&] {
        if (!c.root()) return;
        Event e{Event::Kind::kLatents};
        e.video = x.video.to(at::kCPU).contiguous();
        e.audio = x.audio.to(at::kCPU).contiguous();
        f.set(c.mailbox.call(std::move(e)));
      },
      "waiting for rank 0 to hand the latents to the observer");
  dist::agree_or_throw(c.group, f);
}

}  // namespace

void adapter_stage(const StageContext& c, const std::string& lora) {
  dist::LocalFailure f;
  if (c.parts.lora != lora && c.sessions.running > 1) {
    // Every rank counts the same sessions here: the refusal is the same on every rank.
    const auto name = [](const std::string& l) { return l.empty() ? std::string("none") : "'" + l + "'"; };
    f.set(std::make_exception_ptr(
        Error(ErrorKind::kInvalidArgument,
              "lora " + name(lora) + ": the " + std::to_string(c.sessions.running - 1) +
                  " other request(s) this engine runs use lora " + name(c.parts.lora) +
                  " on the DiT they share; run this one when they have ended, or in an engine of its own")));
  } else if (c.parts.lora != lora) {
    try {
      if (lora.empty()) {
        c.parts.dit->detach_lora();
      } else {
        c.parts.dit->attach_lora(lora);
      }
      c.parts.lora = lora;
    } catch (...) {
      f.capture();
    }
  }
  dist::agree_or_throw(c.group, f);
}

void adaln_stage(const StageContext& c, const Job& job, const std::vector<dit::TimestepSet>& sets) {
  if (!job.adaln_tables) return;
  dist::LocalFailure f;
  try {
    std::vector<dit::TimestepSet> all = sets;
    for (const auto& [session, theirs] : c.sessions.adaln_sets) {
      if (session != c.session) all.insert(all.end(), theirs.begin(), theirs.end());
    }
    c.sessions.adaln_sets[c.session] = sets;
    c.parts.dit->use_adaln_tables(all, /*drop_projections=*/true);
  } catch (...) {
    f.capture();
  }
  dist::agree_or_throw(c.group, f);
}

dit::Latents denoise_stage(const StageContext& c, const Job& job, const text::Conditioning& cond,
                           const std::vector<at::Tensor>& keyframes,
                           const std::vector<dit::KeyframeAnchor>& anchors,
                           const std::vector<at::Tensor>& sounds) {
  if (keyframes.size() != anchors.size()) {
    throw Error(ErrorKind::kInternal, "denoise: " + std::to_string(keyframes.size()) + " keyframes but " +
                                          std::to_string(anchors.size()) + " anchors");
  }
  dit::DenoiseRequest dr;
  dr.text = cond.embeds;
  dr.text_tags = cond.tags;
  std::vector<at::Tensor> keyframe_noise;
  dr.noise = shared_noise(c, job.request.seed, keyframe_noise, keyframes);
  // FL2VA's keyframes, then each planned reference: its picture's latent (an audio reference has
  // none) and its sound.
  size_t picture = 0;
  while (picture < anchors.size() && anchors[picture] != dit::KeyframeAnchor::kReference) {
    dr.keyframes.push_back(
        {dit::noised_keyframe(keyframes[picture], keyframe_noise[picture]), anchors[picture], {}});
    ++picture;
  }
  bool sound = false;
  for (size_t i = 0; i < c.plan.references.size(); ++i) {
    dit::Keyframe k;
    k.anchor = dit::KeyframeAnchor::kReference;
    if (c.plan.references[i].kind != ReferenceKind::kAudio) {
      if (picture >= keyframes.size())
        throw Error(ErrorKind::kInternal, "denoise: a reference without its latent");
      k.latent = dit::noised_keyframe(keyframes[picture], keyframe_noise[picture]);
      ++picture;
    }
    if (i < sounds.size() && sounds[i].defined()) {
      k.audio_rows = sounds[i];
      sound = true;
    }
    dr.keyframes.push_back(std::move(k));
  }
  if (picture != keyframes.size())
    throw Error(ErrorKind::kInternal, "denoise: latents left without a condition");
  dr.video = dit::make_schedule(c.plan.steps, c.plan.video_shift);
  dr.audio = dit::make_schedule(c.plan.steps, c.plan.audio_shift);
  adaln_stage(c, job, dit::evaluation_timesteps(dr.video, dr.audio, !keyframes.empty(), sound));
  dit::Latents x;
  {
    // Every step asks for the same large blocks as the last (common/cpu_block_cache.h); the
    // decode asks for others, so what is kept goes back once the steps are done.
    const CpuBlockCacheScope reuse;
    x = run_steps(c, dr);
  }
  release_cpu_block_cache();
  if (job.want_latents) hand_over_latents(c, x);
  dit::Latents out;
  out.video = x.video.to(at::kCPU, at::kFloat).contiguous();
  out.audio = x.audio.to(at::kCPU, at::kFloat).contiguous();
  return out;
}

}  // namespace h3::engine_detail
