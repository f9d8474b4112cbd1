#include "engine/stages/stage_sounds.h"

#include <ATen/ATen.h>

#include <string>

#include "dist/agree.h"
#include "engine/stages/reference_frames.h"
#include "h3/error.h"

namespace h3::engine_detail {

std::vector<at::Tensor> reference_sounds_stage(const StageContext& c, const GenerationRequest* own) {
  const std::vector<PlannedReference>& planned = c.plan.references;
  std::vector<at::Tensor> rows(planned.size());
  bool any = false;
  for (const PlannedReference& r : planned) any = any || r.audio_latents > 0;
  if (!any) return rows;
  const int64_t channels = c.model.dit.audio_in_channels;
  dist::LocalFailure f;
  if (c.root()) {
    try {
      if (!own || own->references.size() != planned.size()) {
        throw Error(ErrorKind::kInternal, "rank 0's request and its plan disagree on the references");
      }
      if (!c.parts.audio_encoder)
        c.parts.audio_encoder.emplace(
            audio::AudioEncoder::load(c.model.audio_vae_dir).to(c.parts.vae->device()));
      const audio::AudioEncoder& encoder = *c.parts.audio_encoder;
      for (size_t i = 0; i < planned.size(); ++i) {
        const Audio* sound = own->references[i].sound();
        if (planned[i].audio_latents == 0) continue;
        if (!sound) throw Error(ErrorKind::kInternal, "the plan gives a reference sound its request lacks");
        const at::Tensor wave = normalized_sound(*sound, c.plan.generated_frames, encoder.sample_rate());
        rows[i] = encoder.encode(wave);
        if (rows[i].size(0) != 2 * planned[i].audio_latents || rows[i].size(1) != channels) {
          throw Error(ErrorKind::kInternal, "reference " + std::to_string(i + 1) + "'s sound encoded to " +
                                                std::to_string(rows[i].size(0)) + " rows, its plan says " +
                                                std::to_string(2 * planned[i].audio_latents));
        }
      }
    } catch (...) {
      f.capture();
    }
  }
  dist::agree_or_throw(c.group, f);
  for (size_t i = 0; i < planned.size(); ++i) {
    if (planned[i].audio_latents == 0) continue;
    at::Tensor t = c.root() ? rows[i] : at::empty({2 * planned[i].audio_latents, channels}, at::kFloat);
    t = t.to(c.group.device());
    c.group.broadcast(t, 0);
    rows[i] = t.to(at::kCPU).contiguous();
  }
  return rows;
}

}  // namespace h3::engine_detail
