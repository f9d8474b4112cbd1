#include "engine/job.h"

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace h3 {

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ClipPlan, width, height, num_frames, canvas_width, canvas_height,
                                   latent_frames, total_chunks, steps, fps_n, fps_d, generated_frames,
                                   evaluations, audio_latents, audio_samples, audio_rate)

namespace engine_detail {

std::string encode(const Job& job) {
  const nlohmann::json o = {
      {"kind", job.kind == Job::Kind::kGenerate ? "generate"
               : job.kind == Job::Kind::kDecode ? "decode"
                                                : "stop"},
      {"prompt", job.request.prompt},
      {"embeds_path", job.request.embeds_path},
      {"seed", job.request.seed},
      {"audio", job.request.audio},
      {"want_latents", job.want_latents},
      {"free_text_encoder", job.free_text_encoder},
      {"plan", job.plan},
  };
  return o.dump();
}

Job decode_job(const std::string& wire) {
  try {
    const auto o = nlohmann::json::parse(wire);
    Job j;
    const std::string kind = o.at("kind").get<std::string>();
    if (kind != "generate" && kind != "decode" && kind != "stop") {
      throw Error(ErrorKind::kInternal, "a job from rank 0 has an unknown kind '" + kind + "'");
    }
    j.kind = kind == "generate" ? Job::Kind::kGenerate
             : kind == "decode" ? Job::Kind::kDecode
                                : Job::Kind::kStop;
    j.request.prompt = o.at("prompt").get<std::string>();
    j.request.embeds_path = o.at("embeds_path").get<std::string>();
    j.request.seed = o.at("seed").get<uint64_t>();
    j.request.audio = o.at("audio").get<bool>();
    j.want_latents = o.at("want_latents").get<bool>();
    j.free_text_encoder = o.at("free_text_encoder").get<bool>();
    j.plan = o.at("plan").get<ClipPlan>();
    j.request.width = j.plan.width;
    j.request.height = j.plan.height;
    j.request.num_frames = j.plan.num_frames;
    j.request.steps = j.plan.steps;
    return j;
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kInternal, std::string("a job from rank 0 could not be read: ") + e.what());
  }
}

}  // namespace engine_detail
}  // namespace h3
