// The job rank 0 broadcasts: every field survives the wire, and a message it did not write is
// an internal error rather than a crash on some rank.
#include "engine/process/job.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "h3/error.h"

namespace h3::engine_detail {
namespace {

TEST(Job, EveryFieldSurvivesTheWire) {
  Job j;
  j.kind = Job::Kind::kGenerate;
  j.request.prompt = "a \"quoted\" prompt\nwith a newline";
  j.request.embeds_path = "/tmp/e.safetensors";
  j.request.seed = 18446744073709551615ull;  // the full uint64 range
  j.request.audio = true;
  j.request.sampler = Sampler::kCausal;
  j.request.min_steps = 2;
  j.request.positions = CausalPositions::kRelative;
  j.request.prompt_switch = PromptSwitch::kRecache;
  j.want_latents = true;
  j.free_text_encoder = true;
  ClipPlan& p = j.plan;
  p.width = 320;
  p.height = 192;
  p.num_frames = 41;
  p.canvas_width = 320;
  p.canvas_height = 192;
  p.latent_frames = 17;
  p.total_chunks = 3;
  p.steps = 7;
  p.fps_n = 30000;
  p.fps_d = 1001;
  p.generated_frames = 56;
  p.evaluations = 6;
  p.audio_latents = 44;
  p.audio_samples = 800 * 68;
  p.audio_rate = 32000;
  p.sampler = Sampler::kCausal;
  p.min_steps = 3;
  p.keyframe_anchors = {Keyframe::kFirst, Keyframe::kLast};
  p.references = {{ReferenceKind::kImage, 128, 96, 1, 1, 1},
                  {ReferenceKind::kVideo, 192, 160, 38, 22, 7},
                  {ReferenceKind::kAudio, 0, 0, 0, 0, 0, 3200, 4}};
  p.condition_rows = 222;
  p.vision_rows = 160;

  const Job r = decode_job(encode(j));
  // The condition blocks' plan: every rank shapes its broadcasts from it.
  EXPECT_EQ(r.plan.keyframe_anchors, p.keyframe_anchors);
  EXPECT_EQ(r.plan.sampler, Sampler::kCausal);
  EXPECT_EQ(r.request.sampler, Sampler::kCausal);
  // Every rank places and recaches the chunks as rank 0 was asked to.
  EXPECT_EQ(r.request.positions, CausalPositions::kRelative);
  EXPECT_EQ(r.request.prompt_switch, PromptSwitch::kRecache);
  ASSERT_EQ(r.plan.references.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const PlannedReference &a = r.plan.references[i], &b = p.references[i];
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.width, b.width);
    EXPECT_EQ(a.height, b.height);
    EXPECT_EQ(a.frames, b.frames);
    EXPECT_EQ(a.encoded_frames, b.encoded_frames);
    EXPECT_EQ(a.latent_frames, b.latent_frames);
    EXPECT_EQ(a.audio_samples, b.audio_samples);
    EXPECT_EQ(a.audio_latents, b.audio_latents);
  }
  EXPECT_EQ(r.plan.condition_rows, 222);
  EXPECT_EQ(r.plan.vision_rows, 160);
  EXPECT_EQ(r.kind, Job::Kind::kGenerate);
  EXPECT_EQ(r.request.prompt, j.request.prompt);
  EXPECT_EQ(r.request.embeds_path, j.request.embeds_path);
  EXPECT_EQ(r.request.seed, j.request.seed);
  EXPECT_TRUE(r.request.audio);
  EXPECT_TRUE(r.want_latents);
  EXPECT_TRUE(r.free_text_encoder);
  EXPECT_EQ(r.plan.width, 320);
  EXPECT_EQ(r.plan.height, 192);
  EXPECT_EQ(r.plan.num_frames, 41);
  EXPECT_EQ(r.plan.canvas_width, 320);
  EXPECT_EQ(r.plan.canvas_height, 192);
  EXPECT_EQ(r.plan.latent_frames, 17);
  EXPECT_EQ(r.plan.total_chunks, 3);
  EXPECT_EQ(r.plan.steps, 7);
  EXPECT_EQ(r.plan.fps_n, 30000);
  EXPECT_EQ(r.plan.fps_d, 1001);
  EXPECT_EQ(r.plan.generated_frames, 56);
  EXPECT_EQ(r.plan.evaluations, 6);
  EXPECT_EQ(r.plan.audio_latents, 44);
  EXPECT_EQ(r.plan.audio_samples, 800 * 68);
  EXPECT_EQ(r.plan.audio_rate, 32000);
  // A paced stream's ranks hold the AdaLN tables of every count a step change may set.
  EXPECT_EQ(r.plan.min_steps, 3);
  EXPECT_EQ(r.request.min_steps, 2);
  // The request's size and steps are the plan's.
  EXPECT_EQ(r.request.width, 320);
  EXPECT_EQ(r.request.height, 192);
  EXPECT_EQ(r.request.num_frames, 41);
  EXPECT_EQ(r.request.steps, 7);

  Job d;
  d.kind = Job::Kind::kDecode;
  EXPECT_EQ(decode_job(encode(d)).kind, Job::Kind::kDecode);
  EXPECT_FALSE(decode_job(encode(d)).want_latents);
}

// The closed sets travel under their names, as before they were enums: a worker of another build
// reads the same wire.
TEST(Job, SamplerKindsAndAnchorsTravelAsTheirNames) {
  Job j;
  j.request.sampler = Sampler::kCausal;
  j.plan.sampler = Sampler::kCausal;
  j.plan.keyframe_anchors = {Keyframe::kLast, Keyframe::kFirst};
  j.plan.references = {{ReferenceKind::kVideo, 64, 64, 13, 13, 2},
                       {ReferenceKind::kAudio, 0, 0, 0, 0, 0, 1, 1},
                       {ReferenceKind::kImage, 32, 32, 1, 1, 1}};
  const auto wire = nlohmann::json::parse(encode(j));
  EXPECT_EQ(wire.at("request").at("sampler"), "causal");
  EXPECT_EQ(wire.at("plan").at("sampler"), "causal");
  EXPECT_EQ(wire.at("plan").at("keyframe_anchors"), nlohmann::json::parse(R"(["last", "first"])"));
  const auto& refs = wire.at("plan").at("references");
  ASSERT_EQ(refs.size(), 3u);
  EXPECT_EQ(refs[0].at("kind"), "video");
  EXPECT_EQ(refs[1].at("kind"), "audio");
  EXPECT_EQ(refs[2].at("kind"), "image");
  j.request.sampler = Sampler::kEuler;
  EXPECT_EQ(nlohmann::json::parse(encode(j)).at("request").at("sampler"), "euler");
  j.request.positions = CausalPositions::kAbsolute;
  j.request.prompt_switch = PromptSwitch::kRecache;
  const auto named = nlohmann::json::parse(encode(j)).at("request");
  EXPECT_EQ(named.at("positions"), "absolute");
  EXPECT_EQ(named.at("prompt_switch"), "recache");
}

// A name rank 0 cannot have written is an internal error naming it, never a default value.
TEST(Job, AnUnknownSamplerKindOrAnchorIsAnInternalErrorNamingIt) {
  Job j;
  j.plan.keyframe_anchors = {Keyframe::kFirst};
  j.plan.references = {{ReferenceKind::kImage, 32, 32, 1, 1, 1}};
  const std::string wire = encode(j);
  for (const auto& [from, to, named] : {std::tuple<std::string, std::string, std::string>{
                                            R"("sampler":"euler")", R"("sampler":"dpm")", "sampler 'dpm'"},
                                        {R"("kind":"image")", R"("kind":"mask")", "reference kind 'mask'"},
                                        {R"(["first"])", R"(["middle"])", "keyframe 'middle'"}}) {
    std::string bad = wire;
    const size_t at = bad.find(from);
    ASSERT_NE(at, std::string::npos) << from << " in " << wire;
    bad.replace(at, from.size(), to);
    try {
      decode_job(bad);
      ADD_FAILURE() << to << " was read";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInternal) << e.what();
      EXPECT_NE(std::string(e.what()).find("a job from rank 0 could not be read: " + named),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(Job, AMessageWithAFieldMissingIsAnInternalError) {
  try {
    decode_job(R"({"kind":"generate","prompt":"x"})");
    FAIL() << "a job without its plan was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos);
  }
}

TEST(Job, AnUnknownKindIsAnInternalErrorNotAGenerateJob) {
  Job j;
  j.kind = Job::Kind::kDecode;
  std::string wire = encode(j);
  const size_t at = wire.find("\"decode\"");
  ASSERT_NE(at, std::string::npos) << wire;
  wire.replace(at, 8, "\"shutdown\"");
  try {
    decode_job(wire);
    FAIL() << "an unknown kind was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    EXPECT_NE(std::string(e.what()).find("'shutdown'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace h3::engine_detail
