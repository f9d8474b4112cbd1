// FL2VA against diffusers' own MiniMax-H3 pipeline (tests/data/fl2va_pipeline, made by
// bench/reference/fl2va/make_pipeline_vectors.py on the model `h3 make-tiny --conditioning` writes):
// the pictures decoded by GStreamer and put onto the canvas, the presentation's ids and tags and its
// hidden states, the keyframes' latents, the generator's draws, and the final video and audio
// latents of whole requests with a first frame and with first and last frames, at 1 and 2 ranks.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "../cli_run.h"
#include "../text/golden_encoder.h"
#include "../vae/posterior_parity.h"
#include "engine_test_util.h"
#include "image/keyframes.h"
#include "pictures/picture_file.h"
#include "text/prompt_encoder.h"
#include "text/vision_prompt.h"
#include "text/vision_tower.h"
#include "vae/encoder.h"

namespace h3 {
namespace {

namespace fs = std::filesystem;

std::string data(const std::string& rel) {
  const char* root = std::getenv("H3_TEST_DATA");
  return std::string(root ? root : "tests/data") + "/fl2va_pipeline/" + rel;
}

// The vectors' model, written again with the same seed (cases.json records its files' digests).
const std::string& vector_model() {
  return test::conditioning_model_dir();
}

const char* kPrompt = "a red kite over a green hill";

image::Rgb8 rgb8(const Picture& p) {
  return {p.width, p.height, p.rgb};
}

at::Tensor as_tensor(const image::Rgb8& p) {
  return at::from_blob(const_cast<uint8_t*>(p.rgb.data()), {p.height, p.width, 3}, at::kByte).clone();
}

// The vectors' request (cases.json): the prompt, 22 frames, 3 grid points, seed 7, the first
// picture and, with `last`, the last one, decoded by GStreamer.
GenerationRequest pipeline_request(bool last) {
  GenerationRequest r;
  r.prompt = kPrompt;
  r.num_frames = 22;
  r.steps = 3;
  r.seed = 7;
  r.first_frame = pictures::read_picture(data("first.png"), "first-frame");
  if (last) r.last_frame = pictures::read_picture(data("last.png"), "last-frame");
  return r;
}

class Fl2vaParity : public ::testing::TestWithParam<std::string> {
 protected:
  std::map<std::string, at::Tensor> t_ = test::read_tensors(data("case_" + GetParam() + ".safetensors"));
  bool last() const { return GetParam() == "first_last"; }
};

TEST_P(Fl2vaParity, TheKeyframesOnTheCanvasAreThePipelines) {
  const Picture first = pictures::read_picture(data("first.png"), "first-frame");
  const Picture follower = pictures::read_picture(data("last.png"), "last-frame");
  const int64_t h = t_.at("height").item<int64_t>(), w = t_.at("width").item<int64_t>();
  const auto canvas = image::resolve_canvas(first.width, first.height, 32, 160, 256 * 160, "first");
  EXPECT_EQ(canvas[0], h);
  EXPECT_EQ(canvas[1], w);
  EXPECT_TRUE(at::equal(as_tensor(image::stretch_onto(rgb8(first), w, h)), t_.at("keyframe0")));
  if (last()) {
    EXPECT_TRUE(at::equal(as_tensor(image::cover_onto(rgb8(follower), w, h)), t_.at("keyframe1")));
  }
}

TEST_P(Fl2vaParity, ThePresentationAndItsHiddenStatesAreThePipelines) {
  const text::PromptEncoder encoder = text::PromptEncoder::load(vector_model());
  const text::VisionTower tower = text::VisionTower::load(text::text_encoder_dir_of(vector_model()));
  std::vector<text::VisionFeatures> features;
  std::vector<std::array<int64_t, 3>> grids;
  for (const char* k : {"keyframe0", "keyframe1"}) {
    if (!t_.count(k)) continue;
    const text::VisionInputs in = tower.preprocess(t_.at(k));
    features.push_back(tower.forward(in));
    grids.push_back(in.grid_thw);
  }
  const text::VisionPrompt p = text::present_images(encoder.tokenizer(), kPrompt, tower.config(), grids);
  EXPECT_TRUE(at::equal(at::tensor(p.ids, at::kLong), t_.at("input_ids")));
  EXPECT_TRUE(at::equal(p.tags, t_.at("text_token_tags")));
  const text::Conditioning c = text::encode_with_images(encoder.encoder(), p, features);
  const double d = test::max_abs_diff(c.embeds, t_.at("prompt_embeds"));
  std::printf("%s: max |d prompt_embeds| = %.3g\n", GetParam().c_str(), d);
  EXPECT_LE(d, 1e-4);
}

// The fp16 latents bit for bit, but where the unrounded sample lies within what the encoder's
// convolutions leave between CPUs of an fp16 rounding midpoint (one fp16 step there;
// ../vae/posterior_parity.h).
TEST_P(Fl2vaParity, TheKeyframesLatentsAreThePipelines) {
  const vae::VideoEncoder enc = vae::VideoEncoder::load(vector_model() + "/vae");
  for (int i = 0; i < (last() ? 2 : 1); ++i) {
    const std::string k = std::to_string(i);
    const test::ConditioningParity p =
        test::expect_conditioning_latents(enc, t_.at("keyframe" + k).permute({2, 0, 1}).unsqueeze(1),
                                          t_.at("condition_latents" + k), GetParam() + " keyframe " + k);
    std::printf("%s: keyframe %d max |d latents| = %.3g (%lld of %lld differ, %lld at a boundary)\n",
                GetParam().c_str(), i, p.max_diff, static_cast<long long>(p.differ),
                static_cast<long long>(p.numel), static_cast<long long>(p.boundaries));
  }
}

TEST_P(Fl2vaParity, TheRequestsFinalLatentsAreThePipelines) {
  const GenerationRequest r = pipeline_request(last());
  // The reference's audio latents are [2, 32, A]; the engine's rows [2A, 32], channel-major.
  const at::Tensor ref_audio = t_.at("audio_latents").permute({0, 2, 1}).reshape({-1, 32});
  for (int ranks : {1, 2}) {
    EngineOptions o;
    o.model_dir = vector_model();
    o.ranks = ranks;
    o.timeout = std::chrono::seconds(120);
    const auto engine = Engine::open(o);
    test::CollectSink sink;
    at::Tensor video, audio;
    StreamControl cancel;
    engine->generate(r, sink, {}, cancel, test::keep_latents(&video, &audio));
    const double dv = test::max_abs_diff(video, t_.at("latents"));
    const double da = test::max_abs_diff(audio, ref_audio);
    std::printf("%s, %d rank(s): max |d video latents| = %.3g, audio %.3g\n", GetParam().c_str(), ranks, dv,
                da);
    EXPECT_LE(dv, 1e-4) << ranks << " rank(s)";
    EXPECT_LE(da, 1e-4) << ranks << " rank(s)";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Fl2vaParity, ::testing::Values("first", "first_last"));

// `h3 encode-prompt --first-frame --last-frame` writes the presentation the engine builds itself:
// a request with those embeddings and pictures gives the prompt's clip bit for bit.
TEST(Fl2vaEncodePrompt, EmbeddingsOfThePresentationGiveThePromptsClip) {
  const test::TempDir dir("encode-fl2va");
  const std::string embeds = dir / "embeds.safetensors";
  const test::CliRun run = test::run_h3("encode-prompt --model '" + vector_model() + "' --prompt '" +
                                        kPrompt + "' --first-frame '" + data("first.png") +
                                        "' --last-frame '" + data("last.png") + "' --out '" + embeds + "'");
  ASSERT_EQ(run.code, 0) << run.output;
  const auto t = test::read_tensors(embeds);
  // The tags of the vision blocks are 0: this is the presentation, not the prompt alone.
  EXPECT_GT(t.at("tags").eq(0).sum().item<int64_t>(), 0);
  EngineOptions o;
  o.model_dir = vector_model();
  test::expect_embeddings_give_the_prompts_clip(*Engine::open(o), pipeline_request(true), embeds);
  // Only with --ranks 1 and --out.
  const test::CliRun refused =
      test::run_h3("encode-prompt --model '" + vector_model() + "' --prompt x --first-frame '" +
                   data("first.png") + "' --ids-only");
  EXPECT_NE(refused.code, 0);
  EXPECT_NE(refused.output.find("--ranks 1 and --out FILE"), std::string::npos) << refused.output;
}

}  // namespace
}  // namespace h3
