// Ref2VA against diffusers' own MiniMax-H3 pipeline (tests/data/ref2va_pipeline, made by
// bench/reference/ref2va/make_pipeline_vectors.py on the model `h3 make-tiny --conditioning` writes,
// its transformer_ref/): the references decoded by GStreamer and resized to their planned sizes,
// the presentation's ids and tags and its hidden states, the references' latents, the packed
// rows' positions, tags and timesteps, and the final video and audio latents of whole requests
// with one, two and three image references and with video references, at 1 and 2 ranks.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../text/golden_encoder.h"
#include "dit/packed_sequence.h"
#include "engine_test_util.h"
#include "image/keyframes.h"
#include "pictures/picture_file.h"
#include "text/prompt_encoder.h"
#include "text/vision_prompt.h"
#include "text/vision_tower.h"
#include "vae/encoder.h"

namespace h3 {
namespace {

std::string data(const std::string& rel) {
  const char* root = std::getenv("H3_TEST_DATA");
  return std::string(root ? root : "tests/data") + "/ref2va_pipeline/" + rel;
}

const std::string& vector_model() {
  return test::conditioning_model_dir();
}

const char* kPrompt = "a red kite over a green hill";

struct Case {
  std::string name;
  std::vector<std::string> files;
  int64_t width = 0, height = 0;  // 0: unset, the model's canvas
};

// cases.json's cases.
const std::vector<Case>& cases() {
  static const std::vector<Case> c{{"one", {"a.png"}},
                                   {"two", {"a.png", "b.png"}},
                                   {"three_sized", {"b.png", "c.png", "a.png"}, 224, 192}};
  return c;
}

GenerationRequest pipeline_request(const Case& c) {
  GenerationRequest r;
  r.prompt = kPrompt;
  r.num_frames = 22;
  r.steps = 3;
  r.seed = 7;
  r.width = c.width;
  r.height = c.height;
  for (const std::string& f : c.files)
    r.references.push_back({pictures::read_picture(data(f), "reference"), {}});
  return r;
}

class Ref2vaParity : public ::testing::TestWithParam<int> {
 protected:
  const Case& c_ = cases()[static_cast<size_t>(GetParam())];
  std::map<std::string, at::Tensor> t_ = test::read_tensors(data("case_" + c_.name + ".safetensors"));
  const ModelInfo m_ = read_model(vector_model(), /*ref2va=*/true);
  const GenerationRequest r_ = pipeline_request(c_);
  const ClipPlan p_ = make_plan(m_, r_);
  std::vector<at::Tensor> references() const {
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < c_.files.size(); ++i) out.push_back(t_.at("reference" + std::to_string(i)));
    return out;
  }
};

TEST_P(Ref2vaParity, TheReferencesAtTheirPlannedSizesAreThePipelines) {
  EXPECT_EQ(p_.canvas_height, t_.at("height").item<int64_t>());
  EXPECT_EQ(p_.canvas_width, t_.at("width").item<int64_t>());
  ASSERT_EQ(p_.references.size(), c_.files.size());
  for (size_t i = 0; i < c_.files.size(); ++i) {
    const at::Tensor want = t_.at("reference" + std::to_string(i));
    EXPECT_EQ(p_.references[i].height, want.size(0)) << c_.files[i];
    EXPECT_EQ(p_.references[i].width, want.size(1)) << c_.files[i];
    const Picture& pic = r_.references[i].image;
    const image::Rgb8 got = image::stretch_onto({pic.width, pic.height, pic.rgb}, want.size(1), want.size(0));
    EXPECT_TRUE(at::equal(
        at::from_blob(const_cast<uint8_t*>(got.rgb.data()), {got.height, got.width, 3}, at::kByte), want))
        << c_.files[i];
  }
}

TEST_P(Ref2vaParity, ThePresentationAndItsHiddenStatesAreThePipelines) {
  const text::PromptEncoder encoder = text::PromptEncoder::load(vector_model());
  const text::VisionTower tower = text::VisionTower::load(text::text_encoder_dir_of(vector_model()));
  std::vector<text::VisionFeatures> features;
  std::vector<std::array<int64_t, 3>> grids;
  for (const at::Tensor& pixels : references()) {
    const text::VisionInputs in = tower.preprocess(pixels);
    features.push_back(tower.forward(in));
    grids.push_back(in.grid_thw);
  }
  const text::VisionPrompt p = text::present_images(encoder.tokenizer(), kPrompt, tower.config(), grids);
  EXPECT_TRUE(at::equal(at::tensor(p.ids, at::kLong), t_.at("input_ids")));
  EXPECT_TRUE(at::equal(p.tags, t_.at("text_token_tags")));
  const text::Conditioning cond = text::encode_with_images(encoder.encoder(), p, features);
  const double d = test::max_abs_diff(cond.embeds, t_.at("prompt_embeds"));
  std::printf("%s: max |d prompt_embeds| = %.3g\n", c_.name.c_str(), d);
  EXPECT_LE(d, 1e-4);
}

TEST_P(Ref2vaParity, TheReferencesLatentsAndPackedRowsAreThePipelines) {
  const vae::VideoEncoder enc = vae::VideoEncoder::load(vector_model() + "/vae");
  dit::DitInputs in;
  in.text = t_.at("prompt_embeds");
  in.text_tags = t_.at("text_token_tags");
  in.video = t_.at("video_noise");
  in.audio = t_.at("audio_noise");
  in.t_video = t_.at("timesteps")[1].item<float>();
  in.t_audio = t_.at("audio_timesteps")[1].item<float>();
  const std::vector<at::Tensor> pictures = references();
  for (size_t i = 0; i < pictures.size(); ++i) {
    const std::string k = std::to_string(i);
    const at::Tensor z = enc.encode_image(pictures[i].permute({2, 0, 1}));
    const double d = test::max_abs_diff(z, t_.at("condition_latents" + k));
    std::printf("%s: reference %zu max |d latents| = %.3g\n", c_.name.c_str(), i, d);
    EXPECT_LE(d, 1e-4);
    in.keyframes.push_back(
        {dit::noised_keyframe(t_.at("condition_latents" + k), t_.at("reference" + k + "_noise")),
         dit::KeyframeAnchor::kReference});
  }
  const dit::PackedSequence s = dit::pack(m_.dit, in);
  // The engine packs [text | references | audio | video]; the pipeline's rows are in its own order,
  // found through its indices (video_indices: the reference rows first).
  const at::Tensor video_idx = t_.at("video_indices"), refs = video_idx.narrow(0, 0, s.layout.keyframes);
  const at::Tensor order = at::cat({t_.at("text_indices"), refs, t_.at("audio_indices"),
                                    video_idx.narrow(0, refs.size(0), s.layout.video)});
  ASSERT_EQ(order.size(0), s.layout.rows());
  EXPECT_EQ(s.layout.keyframes, p_.condition_rows);
  EXPECT_TRUE(at::equal(s.positions, t_.at("position_ids").index_select(0, order)));
  EXPECT_TRUE(at::equal(s.tags, t_.at("token_tags").index_select(0, order)));
  EXPECT_TRUE(at::equal(s.timesteps, t_.at("row_timesteps")[1].index_select(0, order)));
  EXPECT_TRUE(at::equal(s.keyframe_rows, t_.at("condition_rows")));
}

TEST_P(Ref2vaParity, TheRequestsFinalLatentsAreThePipelines) {
  // The reference's audio latents are [2, 32, A]; the engine's rows [2A, 32], channel-major.
  const at::Tensor ref_audio = t_.at("audio_latents").permute({0, 2, 1}).reshape({-1, 32});
  for (int ranks : {1, 2}) {
    EngineOptions o;
    o.model_dir = vector_model();
    o.ranks = ranks;
    o.ref2va = true;
    o.timeout = std::chrono::seconds(120);
    const auto engine = Engine::open(o);
    const test::Clip clip = test::generate_clip(*engine, r_);
    const double dv = test::max_abs_diff(clip.video, t_.at("latents"));
    const double da = test::max_abs_diff(clip.audio, ref_audio);
    std::printf("%s, %d rank(s): max |d video latents| = %.3g, audio %.3g\n", c_.name.c_str(), ranks, dv, da);
    EXPECT_LE(dv, 1e-4) << ranks << " rank(s)";
    EXPECT_LE(da, 1e-4) << ranks << " rank(s)";
  }
}

// Video references (cases video, image_video, video_image): frames given at their own rate,
// resampled onto 24 fps, cut and put on their own canvas by the engine.
struct VideoCase {
  std::string name;
  std::vector<std::string> refs;  // a PNG, or "v1" / "v2" (video_v1.safetensors at 30 fps, v2 at 24)
  int64_t width = 0, height = 0;
};

const std::vector<VideoCase>& video_cases() {
  static const std::vector<VideoCase> c{
      {"video", {"v1"}}, {"image_video", {"a.png", "v2"}}, {"video_image", {"v1", "a.png"}, 224, 192}};
  return c;
}

Reference video_reference(const std::string& name) {
  const at::Tensor f = test::read_tensors(data("video_" + name + ".safetensors")).at("frames").contiguous();
  Reference r;
  Video& v = r.video;
  v.source = name;
  v.height = f.size(1);
  v.width = f.size(2);
  v.fps_n = name == "v1" ? 30 : 24;
  for (int64_t i = 0; i < f.size(0); ++i) {
    const uint8_t* p = f[i].data_ptr<uint8_t>();
    v.frames.emplace_back(p, p + f[i].numel());
  }
  return r;
}

class Ref2vaVideoParity : public ::testing::TestWithParam<int> {
 protected:
  const VideoCase& c_ = video_cases()[static_cast<size_t>(GetParam())];
  std::map<std::string, at::Tensor> t_ = test::read_tensors(data("case_" + c_.name + ".safetensors"));
  const ModelInfo m_ = read_model(vector_model(), /*ref2va=*/true);
  GenerationRequest request() const {
    GenerationRequest r;
    r.prompt = kPrompt;
    r.num_frames = 39;
    r.steps = 3;
    r.seed = 7;
    r.width = c_.width;
    r.height = c_.height;
    for (const std::string& f : c_.refs) {
      r.references.push_back(f[0] == 'v' ? video_reference(f)
                                         : Reference{pictures::read_picture(data(f), "reference"), {}});
    }
    return r;
  }
};

TEST_P(Ref2vaVideoParity, EachVideoIsPlannedAndPackedAsThePipelineLaysItOut) {
  const ClipPlan p = make_plan(m_, request());
  EXPECT_EQ(p.canvas_height, t_.at("height").item<int64_t>());
  EXPECT_EQ(p.canvas_width, t_.at("width").item<int64_t>());
  dit::DitInputs in;
  in.text = t_.at("prompt_embeds");
  in.text_tags = t_.at("text_token_tags");
  in.video = t_.at("video_noise");
  in.audio = t_.at("audio_noise");
  in.t_video = t_.at("timesteps")[1].item<float>();
  in.t_audio = t_.at("audio_timesteps")[1].item<float>();
  ASSERT_EQ(p.references.size(), c_.refs.size());
  for (size_t i = 0; i < c_.refs.size(); ++i) {
    const std::string k = std::to_string(i);
    const at::Tensor z = t_.at("condition_latents" + k);
    const PlannedReference& r = p.references[i];
    EXPECT_EQ(r.kind, c_.refs[i][0] == 'v' ? "video" : "image");
    EXPECT_EQ(r.latent_frames, z.size(2)) << c_.refs[i];
    EXPECT_EQ(r.height / 16, z.size(3)) << c_.refs[i];
    EXPECT_EQ(r.width / 16, z.size(4)) << c_.refs[i];
    // v1: 48 frames at 30 fps are 38 at 24 fps; v2: 40 at 24 fps cut to the clip's 39.
    if (c_.refs[i] != "a.png") {
      EXPECT_EQ(r.frames, c_.refs[i] == "v1" ? 38 : 39);
    }
    in.keyframes.push_back(
        {dit::noised_keyframe(z, t_.at("reference" + k + "_noise")), dit::KeyframeAnchor::kReference});
  }
  const dit::PackedSequence s = dit::pack(m_.dit, in);
  const at::Tensor video_idx = t_.at("video_indices"), refs = video_idx.narrow(0, 0, s.layout.keyframes);
  const at::Tensor order = at::cat({t_.at("text_indices"), refs, t_.at("audio_indices"),
                                    video_idx.narrow(0, refs.size(0), s.layout.video)});
  ASSERT_EQ(order.size(0), s.layout.rows());
  EXPECT_EQ(s.layout.keyframes, p.condition_rows);
  EXPECT_TRUE(at::equal(s.positions, t_.at("position_ids").index_select(0, order)));
  EXPECT_TRUE(at::equal(s.tags, t_.at("token_tags").index_select(0, order)));
  EXPECT_TRUE(at::equal(s.timesteps, t_.at("row_timesteps")[1].index_select(0, order)));
  EXPECT_TRUE(at::equal(s.keyframe_rows, t_.at("condition_rows")));
}

TEST_P(Ref2vaVideoParity, TheRequestsFinalLatentsAreThePipelines) {
  const GenerationRequest r = request();
  const at::Tensor ref_audio = t_.at("audio_latents").permute({0, 2, 1}).reshape({-1, 32});
  for (int ranks : {1, 2}) {
    EngineOptions o;
    o.model_dir = vector_model();
    o.ranks = ranks;
    o.ref2va = true;
    o.timeout = std::chrono::seconds(120);
    const auto engine = Engine::open(o);
    const test::Clip clip = test::generate_clip(*engine, r);
    const double dv = test::max_abs_diff(clip.video, t_.at("latents"));
    const double da = test::max_abs_diff(clip.audio, ref_audio);
    std::printf("%s, %d rank(s): max |d video latents| = %.3g, audio %.3g\n", c_.name.c_str(), ranks, dv, da);
    EXPECT_LE(dv, 1e-4) << ranks << " rank(s)";
    EXPECT_LE(da, 1e-4) << ranks << " rank(s)";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Ref2vaVideoParity, ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return video_cases()[static_cast<size_t>(i.param)].name;
                         });

INSTANTIATE_TEST_SUITE_P(Cases, Ref2vaParity, ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return cases()[static_cast<size_t>(i.param)].name;
                         });

}  // namespace
}  // namespace h3
