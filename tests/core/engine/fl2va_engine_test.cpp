// FL2VA through the engine (docs/conditioning.md) on a tiny model with the condition path (`h3
// make-tiny --conditioning`: a VAE encoder and a vision tower): the plan's canvas and anchors, the
// refusals of bad pictures and of models without the path, the generator's draw order, and whole
// requests — deterministic, changed by the picture, the same at 1 and 2 ranks.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../../temp_dir.h"
#include "dit/sampler.h"
#include "engine/model/model.h"
#include "engine/planning/fit_plan.h"
#include "engine/planning/memory_guard.h"
#include "engine/planning/plan.h"
#include "engine_test_util.h"
#include "h3/error.h"
#include "text/vision_parameters.h"
#include "vae/encoder_tensors.h"

namespace h3 {
namespace {

namespace fs = std::filesystem;

const std::string& model_dir() {
  return test::conditioning_model_dir();
}

using test::picture;

GenerationRequest request() {
  GenerationRequest r;
  r.prompt = "a red kite over a green hill";
  r.num_frames = 22;
  r.steps = 3;
  r.seed = 7;
  return r;
}

using test::refusal;

TEST(Fl2vaPlan, TheCanvasFollowsThePicturesAspectAtTheModelsSize) {
  const ModelInfo m = read_model(model_dir());  // defaults 256 x 160: short edge 160, area 40960
  GenerationRequest r = request();
  r.first_frame = picture(320, 240, 1);  // 4:3 -> 213.3 x 160 -> 224 x 160
  ClipPlan p = make_plan(m, r);
  EXPECT_EQ(p.width, 224);
  EXPECT_EQ(p.height, 160);
  EXPECT_EQ(p.keyframe_anchors, std::vector<Keyframe>{Keyframe::kFirst});
  // Alone, the last picture sets the canvas: 2:5 -> 160 x 400, over the area -> 128 x 320.
  r.first_frame = Picture();
  r.last_frame = picture(120, 300, 2);
  p = make_plan(m, r);
  EXPECT_EQ(p.width, 128);
  EXPECT_EQ(p.height, 320);
  EXPECT_EQ(p.keyframe_anchors, std::vector<Keyframe>{Keyframe::kLast});
  // Both: the first one's aspect, packed first then last; a size given is kept.
  r.first_frame = picture(300, 300, 3);
  p = make_plan(m, r);
  EXPECT_EQ(p.width, 160);
  EXPECT_EQ(p.height, 160);
  EXPECT_EQ(p.keyframe_anchors, (std::vector<Keyframe>{Keyframe::kFirst, Keyframe::kLast}));
  r.width = 96;
  r.height = 64;
  p = make_plan(m, r);
  EXPECT_EQ(p.width, 96);
  EXPECT_EQ(p.height, 64);
}

TEST(Fl2vaPlan, BadPicturesAndRequestsAreRefusedNamingTheProperty) {
  const ModelInfo m = read_model(model_dir());
  GenerationRequest r = request();
  r.first_frame = picture(1, 1, 1, "dot.png");
  r.first_frame.width = r.first_frame.height = 1;
  std::string e = refusal(m, r);
  EXPECT_NE(e.find("first-frame 'dot.png' is 1x1"), std::string::npos) << e;
  // The size is judged before the pixels: a huge picture is named, whatever its bytes.
  r.first_frame = Picture{"huge.png", 20000, 20000, {0, 0, 0}};
  e = refusal(m, r);
  EXPECT_NE(e.find("first-frame 'huge.png' is 20000x20000"), std::string::npos) << e;
  r.first_frame = picture(64, 64, 1);
  r.first_frame.rgb.pop_back();
  e = refusal(m, r);
  EXPECT_NE(e.find("not 8-bit RGB"), std::string::npos) << e;
  r.first_frame = Picture();
  r.last_frame = picture(500, 100, 1, "strip.png");  // 5:1
  e = refusal(m, r);
  EXPECT_NE(e.find("last-frame 'strip.png': 500x100"), std::string::npos) << e;
  EXPECT_NE(e.find("1:4 to 4:1"), std::string::npos) << e;
  r.last_frame = picture(64, 64, 1);
  r.width = 64;
  e = refusal(m, r);
  EXPECT_NE(e.find("give width and height together"), std::string::npos) << e;
  r.width = 0;
  r.sampler = Sampler::kCausal;
  e = refusal(m, r);
  EXPECT_NE(e.find("euler sampler only"), std::string::npos) << e;
}

// The canvas rule at its limits: a 4:1 and a 1:4 picture (each over the model's area, scaled into
// it: 416 x 96 and 96 x 416) and the smallest picture, 16 x 16 (160 x 160); just past 4:1 refused.
TEST(Fl2vaPlan, TheCanvasTakesFourToOneAndSixteenPixelsAndRefusesOneMore) {
  const ModelInfo m = read_model(model_dir());  // short edge 160, area 256 x 160
  GenerationRequest r = request();
  const struct {
    int64_t w, h, canvas_w, canvas_h;
  } taken[] = {{256, 64, 416, 96}, {64, 256, 96, 416}, {16, 16, 160, 160}, {16, 64, 96, 416}};
  for (const auto& t : taken) {
    r.first_frame = picture(t.w, t.h, 1);
    const ClipPlan p = make_plan(m, r);
    EXPECT_EQ(p.width, t.canvas_w) << t.w << "x" << t.h;
    EXPECT_EQ(p.height, t.canvas_h) << t.w << "x" << t.h;
  }
  r.first_frame = picture(257, 64, 1, "wide.png");
  EXPECT_EQ(refusal(m, r),
            "first-frame 'wide.png': 257x64 (aspect ratio 4.01562) is outside the 1:4 to 4:1 the model was "
            "trained for: crop it, or give width and height");
  r.first_frame = picture(16, 15, 1, "small.png");
  EXPECT_EQ(refusal(m, r), "first-frame 'small.png' is 16x15: each side must be at least 16 pixels");
}

TEST(Fl2vaPlan, AModelWithoutTheConditionPathIsRefusedSayingWhy) {
  // The tests' tiny model is T2VA only: its VAE checkpoint has no encoder.
  const ModelInfo t2va = read_model(default_model_dir());
  const std::string why = fl2va_missing(t2va, false);
  EXPECT_NE(why.find("holds no encoder (encoder.conv_in.weight)"), std::string::npos) << why;
  EXPECT_EQ(fl2va_missing(read_model(model_dir()), false), "");
  // A partition whose index lists no fl2va task (as the release's Ref2VA/ would).
  ModelInfo ref = read_model(model_dir());
  ref.tasks = {"ref2va"};
  EXPECT_NE(fl2va_missing(ref, false).find("lists the tasks [ref2va]"), std::string::npos);
  // Before any picture is decoded: what a request asks, against the model's folder.
  TaskAsk ask;
  ask.first_frame = true;
  EngineOptions o;
  o.model_dir = default_model_dir();
  try {
    check_task(o, ask);
    ADD_FAILURE() << "a T2VA model took a first frame";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()),
              "first-frame asks for FL2VA (image to video), which this model cannot do: " + why);
  }
  o.model_dir = model_dir();
  // The conditioning model has the path; its default length comes back with the verdict (what
  // the element reads a video reference for when num-frames is the model's).
  const int64_t default_frames = read_model(model_dir()).defaults.num_frames;
  EXPECT_EQ(check_task(o, ask), default_frames);
  ask = TaskAsk();
  ask.references = true;
  o.ref2va = true;
  EXPECT_EQ(check_task(o, ask), default_frames);  // and Ref2VA's DiT
  EXPECT_EQ(check_task(o, TaskAsk()), 0);         // T2VA: the model is not read
  o.model_dir = default_model_dir();
  EXPECT_THROW(check_task(o, ask), Error);  // the tiny T2VA model has no transformer_ref/
  // Through the engine's own check, before anything runs.
  const auto engine = test::open_tiny(1);
  GenerationRequest r = request();
  r.first_frame = picture(64, 64, 1);
  try {
    engine->plan(r);
    ADD_FAILURE() << "a T2VA model planned an FL2VA request";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("first-frame asks for FL2VA"), std::string::npos) << e.what();
  }
}

TEST(Fl2vaPlan, TheMemoryEstimateCountsTheEncoderAndTheTowerOnEveryRankHere) {
  const ModelInfo m = read_model(model_dir());
  GenerationRequest r = request();
  r.width = 224;
  r.height = 160;
  EXPECT_EQ(estimate_request_memory(m, make_plan(m, r), MemoryShape{}).conditioning_bytes, 0);
  r.first_frame = picture(320, 240, 1);
  const ClipPlan p = make_plan(m, r);
  const MemoryEstimate one = estimate_request_memory(m, p, MemoryShape{});
  int64_t weights = 0;
  for (const auto& t : vae::encoder_tensors(m.vae)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    weights += 4 * n;
  }
  for (const auto& q : text::vision_parameters(text::VisionConfig::load(m.text_encoder_dir)))
    weights += 4 * q.numel();
  EXPECT_GT(one.conditioning_bytes, weights);
  EXPECT_LT(one.conditioning_bytes, weights + (int64_t{64} << 20));  // tiny activations
  MemoryShape two;
  two.ranks_here = 2;
  EXPECT_EQ(estimate_request_memory(m, p, two).conditioning_bytes, 2 * one.conditioning_bytes);
  EXPECT_EQ(one.peak(),
            one.state_bytes + one.dit_bytes + one.decode_bytes + one.conditioning_bytes + one.margin_bytes);
}

TEST(Fl2vaPlan, TheFitPlannerHoldsTheConditioningOnEveryLayout) {
  const ModelInfo m = read_model(model_dir());
  GenerationRequest r = request();
  r.width = 224;
  r.height = 160;
  PlanOptions o;
  o.ranks = 2;
  o.device_memory = int64_t{1} << 40;
  const auto t2va = plan_layouts(m, make_plan(m, r), o);
  r.first_frame = picture(320, 240, 1);
  const ClipPlan p = make_plan(m, r);
  const auto fl2va = plan_layouts(m, p, o);
  ASSERT_EQ(fl2va.size(), t2va.size());
  ASSERT_EQ(fl2va.size(), 2u);  // the tiny model's 2 heads: TP2 x SP1, TP1 x SP2
  for (size_t i = 0; i < fl2va.size(); ++i) {
    SCOPED_TRACE(fl2va[i].name());
    EXPECT_EQ(t2va[i].conditioning, 0);
    MemoryShape one;
    one.tp = fl2va[i].tp;
    one.activation_bytes = o.dtype_bytes;
    EXPECT_EQ(fl2va[i].conditioning, estimate_request_memory(m, p, one).conditioning_bytes);
    EXPECT_GT(fl2va[i].conditioning, 0);
    EXPECT_EQ(fl2va[i].total(), t2va[i].total() + fl2va[i].conditioning);
  }
}

TEST(Fl2vaPlan, TheNativePartitionsTasksAreRead) {
  // model_index.json's "_minimax_h3" block, as the release's FL2VA/ folder has it.
  const test::TempDir copy("fl2va-index");
  const fs::path dir = copy.str();
  fs::copy(model_dir(), dir, fs::copy_options::recursive);
  std::ofstream(dir / "model_index.json")
      << R"({"_class_name": "MiniMaxH3Pipeline", "_minimax_h3": {"partition": "fl2va", "tasks": ["t2va", "fl2va"]}})";
  EXPECT_EQ(read_model(dir.string()).tasks, (std::vector<std::string>{"t2va", "fl2va"}));
  std::ofstream(dir / "model_index.json") << R"({"_minimax_h3": {"tasks": "fl2va"}})";
  EXPECT_THROW(read_model(dir.string()), Error);
}

TEST(Fl2vaNoise, EachKeyframesNoiseIsDrawnBeforeTheVideoAndTheAudio) {
  std::vector<at::Tensor> keyframe_noise;
  const dit::Latents n =
      dit::draw_noise(11, {1, 24, 7, 4, 6}, {20, 32}, {{1, 24, 1, 4, 6}, {1, 24, 1, 4, 6}}, keyframe_noise);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  ASSERT_EQ(keyframe_noise.size(), 2u);
  EXPECT_TRUE(at::equal(keyframe_noise[0], at::randn({1, 24, 1, 4, 6}, gen, opts)));
  EXPECT_TRUE(at::equal(keyframe_noise[1], at::randn({1, 24, 1, 4, 6}, gen, opts)));
  EXPECT_TRUE(at::equal(n.video, at::randn({1, 24, 7, 4, 6}, gen, opts)));
  EXPECT_TRUE(at::equal(n.audio, at::randn({20, 32}, gen, opts)));
  // Without keyframes: the T2VA draw, unchanged.
  const dit::Latents t = dit::draw_noise(11, {1, 24, 7, 4, 6}, {20, 32});
  auto gen2 = at::make_generator<at::CPUGeneratorImpl>(11);
  EXPECT_TRUE(at::equal(t.video, at::randn({1, 24, 7, 4, 6}, gen2, opts)));
}

using test::Clip;

Clip generate(Engine& e, const GenerationRequest& r) {
  return test::generate_clip(e, r);
}

TEST(Fl2vaEngine, TheKeyframesConditionTheClipAndTheSameRequestGivesTheSameClip) {
  const auto engine = test::open_conditioning_model(1);
  GenerationRequest r = request();
  r.first_frame = picture(320, 240, 1);
  const Clip a = generate(*engine, r);
  ASSERT_TRUE(a.frames.defined());
  EXPECT_EQ(a.frames.sizes(), (at::IntArrayRef{22, 160, 224, 3}));
  EXPECT_EQ(a.video.sizes(), (at::IntArrayRef{1, 24, 7, 10, 14}));
  const Clip again = generate(*engine, r);
  EXPECT_TRUE(at::equal(a.frames, again.frames));
  EXPECT_TRUE(at::equal(a.video, again.video));
  // Another picture of the same size: another clip.
  r.first_frame = picture(320, 240, 2);
  const Clip b = generate(*engine, r);
  EXPECT_GT(test::max_abs_diff(a.video, b.video), 1e-3);
  // The same seed without a keyframe (T2VA at the same size): another clip too.
  GenerationRequest t = request();
  t.width = 224;
  t.height = 160;
  const Clip c = generate(*engine, t);
  EXPECT_GT(test::max_abs_diff(a.video, c.video), 1e-3);
  // A last frame added: another clip again.
  r.first_frame = picture(320, 240, 1);
  r.last_frame = picture(200, 300, 3);
  const Clip d = generate(*engine, r);
  EXPECT_GT(test::max_abs_diff(a.video, d.video), 1e-3);
}

TEST(Fl2vaEngine, WithFreeTextEncoderTheVisionTowerIsReadAgainForTheNextRequest) {
  GenerationRequest r = request();
  r.first_frame = picture(320, 240, 1);
  const Clip kept = generate(*test::open_conditioning_model(1), r);
  EngineOptions o;
  o.model_dir = model_dir();
  o.free_text_encoder = true;
  const auto freeing = Engine::open(o);
  const Clip first = generate(*freeing, r), second = generate(*freeing, r);
  EXPECT_TRUE(at::equal(first.video, kept.video));
  EXPECT_TRUE(at::equal(second.video, kept.video));
}

TEST(Fl2vaEngine, TwoRanksGiveOneRanksClip) {
  GenerationRequest r = request();
  r.first_frame = picture(320, 240, 1);
  r.last_frame = picture(200, 300, 3);
  r.audio = true;
  test::expect_two_ranks_give_one_ranks_clip(r, /*ref2va=*/false);
}

}  // namespace
}  // namespace h3
