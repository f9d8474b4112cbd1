#include "engine/process/job.h"

#include <nlohmann/json.hpp>
#include <string>

#include "h3/error.h"

namespace h3 {

namespace {

// The closed sets travel as their names (h3/request_enums.h), never as numbers.
template <typename Enum>
Enum enum_from_wire(const nlohmann::json& j, Enum (*parse)(const std::string&)) {
  try {
    return parse(j.get<std::string>());
  } catch (const Error& e) {
    throw Error(ErrorKind::kInternal, std::string("a job from rank 0 could not be read: ") + e.what());
  }
}

}  // namespace

void to_json(nlohmann::json& j, Sampler s) {
  j = to_string(s);
}
void from_json(const nlohmann::json& j, Sampler& s) {
  s = enum_from_wire(j, parse_sampler);
}
void to_json(nlohmann::json& j, ReferenceKind k) {
  j = to_string(k);
}
void from_json(const nlohmann::json& j, ReferenceKind& k) {
  k = enum_from_wire(j, parse_reference_kind);
}
void to_json(nlohmann::json& j, Keyframe k) {
  j = to_string(k);
}
void from_json(const nlohmann::json& j, Keyframe& k) {
  k = enum_from_wire(j, parse_keyframe);
}
void to_json(nlohmann::json& j, CausalPositions p) {
  j = to_string(p);
}
void from_json(const nlohmann::json& j, CausalPositions& p) {
  p = enum_from_wire(j, parse_causal_positions);
}
void to_json(nlohmann::json& j, PromptSwitch p) {
  j = to_string(p);
}
void from_json(const nlohmann::json& j, PromptSwitch& p) {
  p = enum_from_wire(j, parse_prompt_switch);
}

// Field by field, by name: every rank reads what rank 0 wrote, whatever order or build.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(PlannedReference, kind, width, height, frames, encoded_frames,
                                   latent_frames, audio_samples, audio_latents)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ClipPlan, width, height, num_frames, canvas_width, canvas_height,
                                   latent_frames, total_chunks, steps, fps_n, fps_d, generated_frames,
                                   evaluations, audio_latents, audio_samples, audio_rate, sampler,
                                   causal_chunks, cache_records, min_steps, video_shift, audio_shift,
                                   warnings, endless, keyframe_anchors, references, condition_rows,
                                   vision_rows, prompt_switch, positions_leave_frame, positions_warning)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(TimedPrompt, seconds, prompt)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(GenerationRequest, prompt, embeds_path, width, height, num_frames, steps,
                                   seed, audio, sampler, sink, window, positions, prompt_switch, video_shift,
                                   audio_shift, lora, prompt_timeline, min_steps)

namespace engine_detail {

// The macro maps a name it does not know to the first kind: decode_job refuses those first.
NLOHMANN_JSON_SERIALIZE_ENUM(Job::Kind, {
                                            {Job::Kind::kGenerate, "generate"},
                                            {Job::Kind::kDecode, "decode"},
                                        })
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Job, kind, request, plan, want_latents, free_text_encoder, adaln_tables)

std::string encode(const Job& job) {
  return nlohmann::json(job).dump();
}

namespace {

Job job_of(const nlohmann::json& o) {
  const std::string kind = o.at("kind").get<std::string>();
  if (kind != "generate" && kind != "decode") {
    throw Error(ErrorKind::kInternal, "a job from rank 0 has an unknown kind '" + kind + "'");
  }
  Job j = o.get<Job>();
  // The ranks run the plan: the request's size and steps are the plan's.
  j.request.width = j.plan.width;
  j.request.height = j.plan.height;
  j.request.num_frames = j.plan.num_frames;
  j.request.steps = j.plan.steps;
  return j;
}

}  // namespace

std::string encode(const TurnMessage& t) {
  nlohmann::json o;
  o["turn"] = t.kind == TurnMessage::Kind::kStop    ? "stop"
              : t.kind == TurnMessage::Kind::kAdmit ? "admit"
                                                    : "resume";
  o["session"] = t.session;
  o["owner_turn_done"] = t.owner_turn_done;
  if (t.kind == TurnMessage::Kind::kAdmit) o["job"] = t.job;
  return o.dump();
}

TurnMessage decode_turn(const std::string& wire) {
  try {
    const auto o = nlohmann::json::parse(wire);
    const std::string kind = o.at("turn").get<std::string>();
    TurnMessage t;
    if (kind == "stop") {
      t.kind = TurnMessage::Kind::kStop;
    } else if (kind == "admit") {
      t.kind = TurnMessage::Kind::kAdmit;
      t.job = job_of(o.at("job"));
    } else if (kind == "resume") {
      t.kind = TurnMessage::Kind::kResume;
    } else {
      throw Error(ErrorKind::kInternal, "a turn from rank 0 has an unknown kind '" + kind + "'");
    }
    t.session = o.at("session").get<uint64_t>();
    t.owner_turn_done = o.at("owner_turn_done").get<bool>();
    return t;
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kInternal, std::string("a turn from rank 0 could not be read: ") + e.what());
  }
}

Job decode_job(const std::string& wire) {
  try {
    const auto o = nlohmann::json::parse(wire);
    return job_of(o);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kInternal, std::string("a job from rank 0 could not be read: ") + e.what());
  }
}

}  // namespace engine_detail
}  // namespace h3
