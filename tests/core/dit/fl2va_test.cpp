// FL2VA keyframe rows (dit/packed_sequence.h) against diffusers' own layout step and transformer on
// the tiny golden transformer (tests/data/fl2va, bench/reference/fl2va/make_vectors.py): keyframes
// anchored first, last and both, and one held at the video's later t; the noising, the packed
// positions, tags and row timesteps exactly, the velocities of the generated rows and one Euler
// step within 1e-4, at 1 rank and at TP 2 and SP 2; AdaLN tables with keyframe rows bit for bit.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "dist/world.h"
#include "dit/sampler.h"
#include "dit/transformer.h"
#include "dit_test_util.h"
#include "h3/error.h"

namespace h3::dit {
namespace {

using testing::data_dir;
using testing::golden_dir;
using testing::max_abs_diff;
using testing::read_tensors;

constexpr double kTolerance = 1e-4;

struct Case {
  std::string name;
  std::vector<KeyframeAnchor> anchors;
  std::map<std::string, at::Tensor> t;
};

std::vector<Case> cases() {
  const auto j = nlohmann::json::parse(std::ifstream(data_dir() + "/fl2va/cases.json"));
  std::vector<Case> out;
  for (const auto& c : j["cases"]) {
    Case k;
    k.name = c["name"].get<std::string>();
    for (const auto& a : c["anchors"])
      k.anchors.push_back(a == "last" ? KeyframeAnchor::kLast : KeyframeAnchor::kFirst);
    k.t = read_tensors(data_dir() + "/fl2va/" + c["file"].get<std::string>());
    out.push_back(std::move(k));
  }
  return out;
}

DitInputs inputs_of(const Case& c) {
  DitInputs in;
  in.text = c.t.at("text");
  in.video = c.t.at("video");
  in.audio = c.t.at("audio");
  in.t_video = c.t.at("t_video").item<float>();
  in.t_audio = c.t.at("t_audio").item<float>();
  for (size_t i = 0; i < c.anchors.size(); ++i) {
    const std::string k = "keyframe" + std::to_string(i);
    in.keyframes.push_back({noised_keyframe(c.t.at(k + "_clean"), c.t.at(k + "_noise")), c.anchors[i], {}});
  }
  return in;
}

TEST(Fl2va, NoisingAndPackingAreTheReferencesExactly) {
  const auto model = Transformer::load(golden_dir() + "/transformer_tiny");
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    const auto in = inputs_of(c);
    for (size_t i = 0; i < in.keyframes.size(); ++i) {
      EXPECT_TRUE(at::equal(in.keyframes[i].latent, c.t.at("keyframe" + std::to_string(i) + "_noised")));
    }
    const auto s = pack(model.config(), in);
    EXPECT_EQ(s.layout.keyframes, static_cast<int64_t>(c.anchors.size()) * 2 * 3);
    EXPECT_EQ(s.layout.rows(), c.t.at("positions").size(0));
    EXPECT_TRUE(at::equal(s.positions, c.t.at("positions")));
    EXPECT_TRUE(at::equal(s.tags, c.t.at("tags")));
    EXPECT_TRUE(at::equal(s.timesteps, c.t.at("row_timesteps")));
  }
}

TEST(Fl2va, VelocitiesOfTheGeneratedRowsAreTheReferencesAtOneAndTwoRanks) {
  const auto all = cases();
  const auto model = Transformer::load(golden_dir() + "/transformer_tiny");
  for (const auto& c : all) {
    const auto v = model.forward(inputs_of(c));
    const double dv = max_abs_diff(v.video, c.t.at("velocity_video"));
    const double da = max_abs_diff(v.audio, c.t.at("velocity_audio"));
    std::printf("FL2VA %s: max |dv_video| = %.3g, max |dv_audio| = %.3g\n", c.name.c_str(), dv, da);
    EXPECT_EQ(v.video.sizes(), c.t.at("velocity_video").sizes()) << c.name;
    EXPECT_LE(dv, kTolerance) << c.name;
    EXPECT_LE(da, kTolerance) << c.name;
  }
  // TP 2 (2 heads, one each) and SP 2 (the rows split, keyframes included).
  std::vector<testing::VelocityCase> two_ranks;
  for (const auto& c : all) {
    two_ranks.push_back({c.name, inputs_of(c), c.t.at("velocity_video"), c.t.at("velocity_audio")});
  }
  testing::expect_velocities_at_two_ranks(two_ranks, kTolerance);
}

TEST(Fl2va, OneDenoiseStepIsTheReferences) {
  for (const auto& c : cases()) {
    if (!c.t.count("step_video")) continue;
    const auto model = Transformer::load(golden_dir() + "/transformer_tiny");
    const auto sched = make_schedule(2, kVideoShift);
    const float t = sched.timesteps[0].item<float>();
    EXPECT_EQ(t, c.t.at("step_t").item<float>());
    auto in = inputs_of(c);
    in.t_video = t;
    const auto v = model.forward(in);
    const auto next =
        euler_step(in.video, v.video, t, sched.sigmas[0].item<float>(), sched.sigmas[1].item<float>());
    const double d = max_abs_diff(next, c.t.at("step_video"));
    std::printf("FL2VA %s: one Euler step, max |d| = %.3g\n", c.name.c_str(), d);
    EXPECT_LE(d, kTolerance);
  }
}

TEST(Fl2va, AdalnTablesHoldTheKeyframeRowsTimestep) {
  const auto c = cases().front();
  DenoiseRequest r;
  const auto in = inputs_of(c);
  r.text = in.text;
  r.noise = Latents{in.video, in.audio};
  r.video = make_schedule(4, kVideoShift);
  r.audio = make_schedule(4, kAudioShift);
  r.keyframes = in.keyframes;
  const auto fly = Transformer::load(golden_dir() + "/transformer_tiny");
  auto tab = Transformer::load(golden_dir() + "/transformer_tiny");
  const auto sets = evaluation_timesteps(r.video, r.audio, /*keyframes=*/true);
  for (const auto& s : sets)
    EXPECT_NE(std::find(s.begin(), s.end(), kKeyframeTimestep), s.end()) << describe(s);
  tab.use_adaln_tables(sets, true);
  const auto a = denoise(fly, r), b = denoise(tab, r);
  EXPECT_TRUE(at::equal(a.video, b.video));
  EXPECT_TRUE(at::equal(a.audio, b.audio));
  // Without the keyframes' timestep the tables refuse the first evaluation, naming it.
  Transformer lacking(fly.config(), fly.weights());
  lacking.use_adaln_tables(evaluation_timesteps(r.video, r.audio), true);
  try {
    denoise(lacking, r);
    ADD_FAILURE() << "ran without the keyframes' table";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("0.9990"), std::string::npos) << e.what();
  }
}

TEST(Fl2va, AKeyframeOffTheCanvasIsRefusedNamingIt) {
  const auto model = Transformer::load(golden_dir() + "/transformer_tiny");
  auto in = inputs_of(cases().front());
  in.keyframes.push_back({at::zeros({1, 24, 1, 6, 6}), KeyframeAnchor::kLast, {}});
  try {
    model.forward(in);
    ADD_FAILURE() << "a keyframe of another canvas was packed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'keyframe 1' has shape [1, 24, 1, 6, 6]"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("[1, 24, 1, 4, 6]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace h3::dit
