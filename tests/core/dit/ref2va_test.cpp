// Ref2VA image-reference rows (dit/packed_sequence.h, KeyframeAnchor::kReference) against diffusers'
// own Ref2VA layout step, row timesteps and transformer on the tiny golden transformer
// (tests/data/ref2va, bench/reference/ref2va/make_vectors.py): two references of different latent
// sizes and one held at the video's later t. Each reference at its own size and time slot (L + i),
// the generated rows after them: the noising, positions, tags and row timesteps exactly, the
// velocities of the generated rows and one Euler step within 1e-4, at 1 rank and at TP 2 and SP 2.
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
  size_t references = 0;
  std::map<std::string, at::Tensor> t;
};

std::vector<Case> cases() {
  const auto j = nlohmann::json::parse(std::ifstream(data_dir() + "/ref2va/cases.json"));
  std::vector<Case> out;
  for (const auto& c : j["cases"]) {
    Case k;
    k.name = c["name"].get<std::string>();
    k.t = read_tensors(data_dir() + "/ref2va/" + c["file"].get<std::string>());
    while (k.t.count("reference_" + std::to_string(k.references))) ++k.references;
    out.push_back(std::move(k));
  }
  return out;
}

DitInputs inputs_of(const Case& c) {
  DitInputs in;
  in.text = c.t.at("text");
  in.text_tags = c.t.at("tags");
  in.video = c.t.at("video");
  in.audio = c.t.at("audio");
  in.t_video = c.t.at("t_video").item<float>();
  in.t_audio = c.t.at("t_audio").item<float>();
  for (size_t i = 0; i < c.references; ++i) {
    const std::string k = "reference_" + std::to_string(i);
    in.keyframes.push_back(
        {noised_keyframe(c.t.at(k + "_clean"), c.t.at(k + "_noise")), KeyframeAnchor::kReference, {}});
  }
  return in;
}

TEST(Ref2va, NoisingAndPackingAreTheReferencesExactly) {
  const auto model = Transformer::load(golden_dir() + "/transformer_tiny");
  const auto all = cases();
  ASSERT_EQ(all.size(), 2u);
  for (const auto& c : all) {
    SCOPED_TRACE(c.name);
    ASSERT_GE(c.references, 1u);
    const auto in = inputs_of(c);
    int64_t rows = 0;
    for (size_t i = 0; i < in.keyframes.size(); ++i) {
      const auto& z = in.keyframes[i].latent;
      EXPECT_TRUE(at::equal(z, c.t.at("reference_" + std::to_string(i))));
      rows += z.size(3) / 2 * z.size(4) / 2;
    }
    const auto s = pack(model.config(), in);
    EXPECT_EQ(s.layout.keyframes, rows);
    EXPECT_EQ(s.layout.rows(), c.t.at("positions").size(0));
    const at::Tensor dp = (s.positions - c.t.at("positions")).abs();
    EXPECT_TRUE(at::equal(s.positions, c.t.at("positions")))
        << "max |d position| " << dp.max().item<double>() << " at row "
        << dp.amax(1).argmax().item<int64_t>();
    EXPECT_TRUE(at::equal(s.tags, c.t.at("token_tags")));
    EXPECT_TRUE(at::equal(s.timesteps, c.t.at("row_timesteps")));
  }
}

TEST(Ref2va, VelocitiesAndOneEulerStepAreTheReferencesAtOneAndTwoRanks) {
  const auto all = cases();
  const auto model = Transformer::load(golden_dir() + "/transformer_tiny");
  for (const auto& c : all) {
    const auto in = inputs_of(c);
    const auto v = model.forward(in);
    const double dv = max_abs_diff(v.video, c.t.at("velocity_video"));
    const double da = max_abs_diff(v.audio, c.t.at("velocity_audio"));
    // The reference's step on the grid [1 - t_video, 0]: straight to the clean estimate.
    const auto next = euler_step(in.video, v.video, in.t_video, 1.0f - in.t_video, 0.0f);
    const double ds = max_abs_diff(next, c.t.at("step_video"));
    std::printf("Ref2VA %s: max |dv_video| = %.3g, max |dv_audio| = %.3g, Euler step %.3g\n", c.name.c_str(),
                dv, da, ds);
    EXPECT_LE(dv, kTolerance) << c.name;
    EXPECT_LE(da, kTolerance) << c.name;
    EXPECT_LE(ds, kTolerance) << c.name;
  }
  std::vector<testing::VelocityCase> two_ranks;
  for (const auto& c : all) {
    two_ranks.push_back({c.name, inputs_of(c), c.t.at("velocity_video"), c.t.at("velocity_audio")});
  }
  testing::expect_velocities_at_two_ranks(two_ranks, kTolerance);
}

TEST(Ref2va, BadReferencesAreRefusedNamingThem) {
  const auto model = Transformer::load(golden_dir() + "/transformer_tiny");
  const auto expect_refused = [&](const DitInputs& in, const std::string& needle) {
    try {
      model.forward(in);
      ADD_FAILURE() << "packed: " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto in = inputs_of(cases().front());
  // A reference off the patch grid.
  in.keyframes.push_back({at::zeros({1, 24, 1, 5, 4}), KeyframeAnchor::kReference, {}});
  expect_refused(in, "'keyframe 2' (a reference) has shape [1, 24, 1, 5, 4]");
  // References and FL2VA keyframes together.
  in.keyframes.back() = {at::zeros({1, 24, 1, 4, 6}), KeyframeAnchor::kFirst, {}};
  expect_refused(in, "mix FL2VA keyframes with Ref2VA references");
  // Sound on an image, and sound of the wrong width.
  in.keyframes.back() = {at::zeros({1, 24, 1, 4, 6}), KeyframeAnchor::kReference, at::zeros({4, 32})};
  expect_refused(in, "is an image reference with sound: only a video has a soundtrack");
  in.keyframes.back() = {at::Tensor(), KeyframeAnchor::kReference, at::zeros({4, 31})};
  expect_refused(in, "'keyframe 2''s sound has shape [4, 31]");
}

// Sound in the packed sequence: an image, an audio reference (its rows on the clock where it stands,
// pinned to the generated grid's edges) and a video with its soundtrack (the soundtrack's rows just
// before its frames, from the same time, pinned to its own grid's edges; the clock moves on by the
// longer of the two), each sound row tagged audio and held at t = 1.
TEST(Ref2va, SoundIsPackedOnTheClockBeforeItsFrames) {
  const auto model = Transformer::load(golden_dir() + "/transformer_tiny");
  DitInputs in;
  in.text = at::randn({4, model.config().text_dim});
  in.video = at::randn({1, 24, 7, 4, 4});  // a 2 x 2 patch grid
  in.audio = at::randn({4, 32});           // 2 latents a channel
  in.t_video = 0.5f;
  in.t_audio = 0.25f;
  in.keyframes.push_back({at::randn({1, 24, 1, 4, 4}), KeyframeAnchor::kReference, {}});
  in.keyframes.push_back({at::Tensor(), KeyframeAnchor::kReference, at::randn({6, 32})});
  in.keyframes.push_back({at::randn({1, 24, 7, 4, 6}), KeyframeAnchor::kReference, at::randn({10, 32})});
  const PackedSequence s = pack(model.config(), in);
  EXPECT_EQ(s.layout.keyframes, 4 + 6 + 10 + 7 * 2 * 3);
  ASSERT_EQ(s.condition_runs.size(), 4u);
  EXPECT_FALSE(s.condition_runs[0].audio);
  EXPECT_TRUE(s.condition_runs[1].audio && s.condition_runs[2].audio);
  EXPECT_EQ(s.condition_runs[2].rows, 10);
  EXPECT_EQ(s.condition_audio_rows.size(0), 16);
  EXPECT_TRUE(at::equal(s.condition_audio_rows.narrow(0, 6, 10), in.keyframes[2].audio_rows));
  const auto pos = s.positions.accessor<double, 2>();
  const std::vector<double> target_w = spatial_grid(2, 2, 2), own_w = spatial_grid(3, 2, 3);
  EXPECT_EQ(pos[4][0], 4.0);  // the image: one slot from L
  for (int64_t a = 0; a < 3; ++a) {
    EXPECT_EQ(pos[8 + a][0], 5.0 + static_cast<double>(a));  // the audio reference from 5
    EXPECT_EQ(pos[8 + a][1], 0.0);
    EXPECT_EQ(pos[8 + a][2], target_w.front());
    EXPECT_EQ(pos[11 + a][2], target_w.back());
  }
  for (int64_t a = 0; a < 5; ++a) {
    EXPECT_EQ(pos[14 + a][0], 8.0 + static_cast<double>(a));  // the soundtrack from 8
    EXPECT_EQ(pos[14 + a][2], own_w.front());
    EXPECT_EQ(pos[19 + a][2], own_w.back());
  }
  EXPECT_EQ(pos[24][0], 8.0);  // the video's first latent frame, with its soundtrack
  // The video's 7 latent frames span 5/3 * 22 > 5 latents: the target starts there.
  double span = 0;
  for (int k = 0; k < 7; ++k) span += 5.0 / 3.0 * (k % 5 == 0 ? 1 : 4);
  EXPECT_EQ(pos[s.layout.audio_begin()][0], 8.0 + span);
  for (int64_t r = 0; r < s.layout.rows(); ++r) {
    const bool sound = r >= 8 && r < 24;
    if (r < 4) continue;
    if (r < s.layout.audio_begin()) {
      EXPECT_EQ(s.tags[r].item<int64_t>(), sound ? kTagAudio : kTagVideo) << r;
      EXPECT_EQ(s.timesteps[r].item<float>(), sound ? kSoundTimestep : kKeyframeTimestep) << r;
    }
  }
  // A forward runs on it and returns velocities for the generated rows only.
  const Velocity v = model.forward(in);
  EXPECT_EQ(v.audio.sizes(), in.audio.sizes());
  EXPECT_EQ(v.video.sizes(), in.video.sizes());
}

}  // namespace
}  // namespace h3::dit
