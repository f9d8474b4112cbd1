// Ref2VA against diffusers' own MiniMax-H3 pipeline (tests/data/ref2va_pipeline, made by
// bench/reference/ref2va/make_pipeline_vectors.py on the model `h3 make-tiny --conditioning` writes,
// its transformer_ref/): the references decoded by GStreamer and resized to their planned sizes,
// the presentation's ids and tags and its hidden states, the references' latents, the packed
// rows' positions, tags and timesteps, the references' sound rows, and the final video and audio
// latents of whole requests with one, two and three image references, with video references
// (resampled onto 24 fps, compared by digest; one shorter than a 22-frame encode), with audio
// references and a video's soundtrack, at 1 and 2 ranks.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../cli_run.h"
#include "../text/golden_encoder.h"
#include "../vae/posterior_parity.h"
#include "admission/crypto.h"
#include "audio/audio_decoder.h"
#include "audio/audio_encoder.h"
#include "dit/packed_sequence.h"
#include "engine/planning/plan.h"
#include "engine/stages/reference_frames.h"
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

// cases.json's cases: image references (PNGs), video references ("v1": video_v1.safetensors at
// 30 fps, "v2": video_v2.safetensors at 24 fps), audio references ("s1" ... "s3":
// sound_<name>.safetensors, a waveform [C, N] and its rate) and a video with a soundtrack
// ("v1+s2"); "v3": 20 frames at 30 fps, 16 at 24, shorter than one 22-frame encode; the canvas (0:
// unset) and the frames asked for.
struct Case {
  std::string name;
  std::vector<std::string> refs;
  int64_t width = 0, height = 0, frames = 22;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c{{"one", {"a.png"}},
                                   {"two", {"a.png", "b.png"}},
                                   {"three_sized", {"b.png", "c.png", "a.png"}, 224, 192},
                                   {"video", {"v1"}, 0, 0, 39},
                                   {"image_video", {"a.png", "v2"}, 0, 0, 39},
                                   {"video_image", {"v1", "a.png"}, 224, 192, 39},
                                   {"image_audio", {"a.png", "s1"}},
                                   {"video_sound", {"v1+s2"}, 0, 0, 39},
                                   {"audio_video_image", {"s3", "v2", "a.png"}, 224, 192, 39},
                                   {"short_video", {"v3", "a.png"}}};
  return c;
}

bool is_video(const std::string& ref) {
  return ref[0] == 'v';
}
bool is_sound(const std::string& ref) {
  return ref[0] == 's';
}
bool has_sound(const std::string& ref) {
  return is_sound(ref) || ref.find('+') != std::string::npos;
}

// A sound file of the vectors as a caller hands it over: interleaved samples at its rate.
Audio sound(const std::string& name) {
  const auto t = test::read_tensors(data("sound_" + name + ".safetensors"));
  const at::Tensor w = t.at("wave").t().contiguous();  // [N, C]
  Audio a;
  a.source = name;
  a.rate = t.at("rate").item<int64_t>();
  a.channels = w.size(1);
  a.samples.assign(w.data_ptr<float>(), w.data_ptr<float>() + w.numel());
  return a;
}

Reference reference(const std::string& ref) {
  if (is_sound(ref)) {
    Reference r;
    r.audio = sound(ref);
    return r;
  }
  if (!is_video(ref)) return {pictures::read_picture(data(ref), "reference"), {}, {}};
  const std::string frames = ref.substr(0, 2);
  const at::Tensor f = test::read_tensors(data("video_" + frames + ".safetensors")).at("frames").contiguous();
  Reference r;
  Video& v = r.video;
  v.source = ref;
  v.height = f.size(1);
  v.width = f.size(2);
  v.fps_n = frames == "v2" ? 24 : 30;
  if (has_sound(ref)) v.soundtrack = sound(ref.substr(3));
  for (int64_t i = 0; i < f.size(0); ++i) {
    const uint8_t* p = f[i].data_ptr<uint8_t>();
    v.frames.emplace_back(p, p + f[i].numel());
  }
  return r;
}

GenerationRequest pipeline_request(const Case& c) {
  GenerationRequest r;
  r.prompt = kPrompt;
  r.num_frames = c.frames;
  r.steps = 3;
  r.seed = 7;
  r.width = c.width;
  r.height = c.height;
  for (const std::string& ref : c.refs) r.references.push_back(reference(ref));
  return r;
}

class Ref2vaParity : public ::testing::TestWithParam<int> {
 protected:
  const Case& c_ = cases()[static_cast<size_t>(GetParam())];
  std::map<std::string, at::Tensor> t_ = test::read_tensors(data("case_" + c_.name + ".safetensors"));
  const ModelInfo m_ = read_model(vector_model(), /*ref2va=*/true);
  const GenerationRequest r_ = pipeline_request(c_);
  const ClipPlan p_ = make_plan(m_, r_);
  // cases.json's record of reference `i` of this case.
  nlohmann::json details(size_t i) const {
    std::ifstream in(data("cases.json"));
    const nlohmann::json index = nlohmann::json::parse(in);
    for (const auto& c : index.at("cases")) {
      if (c.at("name") == c_.name) return c.at("reference_details").at(i);
    }
    ADD_FAILURE() << "no case " << c_.name << " in cases.json";
    return {};
  }
  // Each reference as the engine shows it to the encoders: an image at its planned size, a video
  // on 24 fps and its canvas; undefined for sound alone.
  std::vector<at::Tensor> pixels() const {
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < c_.refs.size(); ++i) {
      const Reference& r = r_.references[i];
      const PlannedReference& planned = p_.references[i];
      if (r.is_audio()) {
        out.emplace_back();
        continue;
      }
      if (r.is_video()) {
        out.push_back(normalized_video(r.video, planned));
        continue;
      }
      const image::Rgb8 got =
          image::stretch_onto({r.image.width, r.image.height, r.image.rgb}, planned.width, planned.height);
      out.push_back(
          at::from_blob(const_cast<uint8_t*>(got.rgb.data()), {got.height, got.width, 3}, at::kByte).clone());
    }
    return out;
  }
};

TEST_P(Ref2vaParity, TheReferencesOnTheirPlannedSizesAndClockAreThePipelines) {
  EXPECT_EQ(p_.canvas_height, t_.at("height").item<int64_t>());
  EXPECT_EQ(p_.canvas_width, t_.at("width").item<int64_t>());
  ASSERT_EQ(p_.references.size(), c_.refs.size());
  const std::vector<at::Tensor> got = pixels();
  for (size_t i = 0; i < c_.refs.size(); ++i) {
    const std::string k = std::to_string(i);
    const PlannedReference& planned = p_.references[i];
    // Sound: as many latents a channel as the pipeline packed rows for it.
    EXPECT_EQ(planned.audio_latents,
              has_sound(c_.refs[i]) ? t_.at("reference" + k + "_sound_rows").size(0) / 2 : 0)
        << c_.refs[i];
    if (is_sound(c_.refs[i])) {
      EXPECT_EQ(planned.kind, ReferenceKind::kAudio);
      continue;
    }
    const at::Tensor z = t_.at("condition_latents" + k);
    EXPECT_EQ(planned.kind, is_video(c_.refs[i]) ? ReferenceKind::kVideo : ReferenceKind::kImage)
        << c_.refs[i];
    EXPECT_EQ(planned.latent_frames, z.size(2)) << c_.refs[i];
    if (!is_video(c_.refs[i])) {
      EXPECT_TRUE(at::equal(got[i], t_.at("reference" + k))) << c_.refs[i];
      continue;
    }
    // The pipeline's frames, by digest: v1's 48 at 30 fps are 38 at 24 fps; v2's 40 are cut to 39.
    const nlohmann::json d = details(i);
    EXPECT_EQ(planned.frames, d.at("normalized_frames").get<int64_t>()) << c_.refs[i];
    const std::string clip = c_.refs[i].substr(0, 2);
    EXPECT_EQ(planned.frames, clip == "v1" ? 38 : clip == "v2" ? 39 : 16);
    EXPECT_EQ(planned.encoded_frames, d.at("encoded_frames").get<int64_t>()) << c_.refs[i];
    const at::Tensor v = got[i].contiguous();
    EXPECT_EQ(dist::sha256_hex(std::string(reinterpret_cast<const char*>(v.data_ptr<uint8_t>()), v.numel())),
              d.at("normalized_sha256").get<std::string>())
        << c_.refs[i];
    EXPECT_TRUE(at::equal(v[0], t_.at("reference" + k + "_first"))) << c_.refs[i];
    EXPECT_TRUE(at::equal(v[v.size(0) - 1], t_.at("reference" + k + "_last"))) << c_.refs[i];
  }
}

TEST_P(Ref2vaParity, ThePresentationAndItsHiddenStatesAreThePipelines) {
  const text::PromptEncoder encoder = text::PromptEncoder::load(vector_model());
  const text::VisionTower tower = text::VisionTower::load(text::text_encoder_dir_of(vector_model()));
  std::vector<text::VisionFeatures> features;
  std::vector<text::PresentedReference> presented;
  const std::vector<at::Tensor> got = pixels();
  for (size_t i = 0; i < got.size(); ++i) {
    const at::Tensor& px = got[i];
    text::PresentedReference shown;
    if (!px.defined()) {
      shown.audio_only = true;
    } else if (px.dim() == 3) {
      const text::VisionInputs in = tower.preprocess(px);
      features.push_back(tower.forward(in));
      shown = {false, in.grid_thw, {}};
    } else {
      const std::vector<int64_t> read = conditioner_frames(px.size(0));
      const text::VisionInputs in = tower.preprocess_video(px.index_select(0, at::tensor(read, at::kLong)));
      features.push_back(tower.forward(in));
      shown = {true, in.grid_thw, block_seconds(static_cast<int64_t>(read.size()))};
    }
    shown.sound = has_sound(c_.refs[i]);
    presented.push_back(shown);
  }
  const text::VisionPrompt p =
      text::present_references(encoder.tokenizer(), kPrompt, tower.config(), presented);
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
  const std::vector<at::Tensor> got = pixels();
  const audio::AudioEncoder sound_encoder = audio::AudioEncoder::load(vector_model() + "/audio_vae");
  std::vector<at::Tensor> sounds;
  for (size_t i = 0; i < got.size(); ++i) {
    const std::string k = std::to_string(i);
    dit::Keyframe kf{{}, dit::KeyframeAnchor::kReference, {}};
    if (const Audio* a = r_.references[i].sound()) {
      // Cut, upmixed, resampled and encoded as the engine does it.
      const at::Tensor rows = sound_encoder.encode(normalized_sound(*a, p_.generated_frames, 32000));
      const double d = test::max_abs_diff(rows, t_.at("reference" + k + "_sound_rows"));
      std::printf("%s: reference %zu max |d sound rows| = %.3g\n", c_.name.c_str(), i, d);
      EXPECT_LE(d, 1e-4);
      kf.audio_rows = rows;
      sounds.push_back(t_.at("reference" + k + "_sound_rows"));
    }
    if (!got[i].defined()) {
      in.keyframes.push_back(kf);
      continue;
    }
    // The fp16 latents bit for bit, but where the unrounded sample lies within what the encoder's
    // convolutions leave between CPUs of an fp16 rounding midpoint (../vae/posterior_parity.h).
    const at::Tensor frames =
        got[i].dim() == 3 ? got[i].permute({2, 0, 1}).unsqueeze(1)
                          : got[i].narrow(0, 0, p_.references[i].encoded_frames).permute({3, 0, 1, 2});
    const test::ConditioningParity parity = test::expect_conditioning_latents(
        enc, frames, t_.at("condition_latents" + k), c_.name + " reference " + k);
    std::printf("%s: reference %zu max |d latents| = %.3g (%lld of %lld differ, %lld at a boundary)\n",
                c_.name.c_str(), i, parity.max_diff, static_cast<long long>(parity.differ),
                static_cast<long long>(parity.numel), static_cast<long long>(parity.boundaries));
    kf.latent = dit::noised_keyframe(t_.at("condition_latents" + k), t_.at("reference" + k + "_noise"));
    in.keyframes.push_back(kf);
  }
  const dit::PackedSequence s = dit::pack(m_.dit, in);
  // Both pack [text | reference blocks, each its sound then its frames | audio | video]: the
  // pipeline's index lists say so (text first; its video and audio rows each in packed order).
  const int64_t rows = s.layout.rows();
  ASSERT_EQ(t_.at("position_ids").size(0), rows);
  EXPECT_TRUE(at::equal(t_.at("text_indices"), at::arange(s.layout.text, at::kLong)));
  const at::Tensor audio_idx = t_.at("audio_indices"), video_idx = t_.at("video_indices");
  EXPECT_TRUE(at::equal(audio_idx.narrow(0, audio_idx.size(0) - s.layout.audio, s.layout.audio),
                        at::arange(s.layout.audio_begin(), s.layout.video_begin(), at::kLong)));
  EXPECT_TRUE(at::equal(video_idx.narrow(0, video_idx.size(0) - s.layout.video, s.layout.video),
                        at::arange(s.layout.video_begin(), rows, at::kLong)));
  EXPECT_EQ(s.layout.keyframes, p_.condition_rows);
  EXPECT_TRUE(at::equal(s.positions, t_.at("position_ids")));
  EXPECT_TRUE(at::equal(s.tags, t_.at("token_tags")));
  EXPECT_TRUE(at::equal(s.timesteps, t_.at("row_timesteps")[1]));
  EXPECT_TRUE(at::equal(s.keyframe_rows, t_.at("condition_rows")));
  if (!sounds.empty()) {
    EXPECT_LE(test::max_abs_diff(s.condition_audio_rows, at::cat(sounds)), 1e-4);
  }
}

TEST_P(Ref2vaParity, TheRequestsFinalLatentsAreThePipelines) {
  // The reference's audio latents are [2, 32, A]; the engine's rows [2A, 32], channel-major.
  const at::Tensor ref_audio = t_.at("audio_latents").permute({0, 2, 1}).reshape({-1, 32});
  for (int ranks : {1, 2}) {
    const test::Clip clip = test::generate_clip(*test::open_conditioning_model(ranks, /*ref2va=*/true), r_);
    const double dv = test::max_abs_diff(clip.video, t_.at("latents"));
    const double da = test::max_abs_diff(clip.audio, ref_audio);
    std::printf("%s, %d rank(s): max |d video latents| = %.3g, audio %.3g\n", c_.name.c_str(), ranks, dv, da);
    EXPECT_LE(dv, 1e-4) << ranks << " rank(s)";
    EXPECT_LE(da, 1e-4) << ranks << " rank(s)";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Ref2vaParity, ::testing::Range(0, static_cast<int>(cases().size())),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return cases()[static_cast<size_t>(i.param)].name;
                         });

// `h3 encode-prompt --reference ... --frames F` writes the presentation the engine builds itself
// for the same references (a video with its soundtrack, a sound, an image): a request with those
// embeddings and references gives the prompt's clip bit for bit.
TEST(Ref2vaEncodePrompt, EmbeddingsOfThePresentationGiveThePromptsClip) {
  const test::TempDir dir("encode-ref2va");
  const std::string embeds = dir / "embeds.safetensors";
  // The vectors' sounds as WAVs, for the CLI to decode.
  const std::string wav = dir / "s3.wav";
  const Audio s3 = sound("s3");
  audio::write_wav(wav,
                   at::from_blob(const_cast<float*>(s3.samples.data()), {s3.frames(), 2}).t().contiguous(),
                   static_cast<int>(s3.rate));
  const test::CliRun run =
      test::run_h3("encode-prompt --model '" + vector_model() + "' --prompt '" + kPrompt + "' --reference '" +
                   data("b.png") + "' --reference '" + wav + "' --frames 22 --out '" + embeds + "'");
  ASSERT_EQ(run.code, 0) << run.output;
  const auto t = test::read_tensors(embeds);
  EXPECT_GT(t.at("tags").eq(0).sum().item<int64_t>(), 0);  // a vision block
  GenerationRequest r;
  r.prompt = kPrompt;
  r.num_frames = 22;
  r.steps = 3;
  r.seed = 7;
  r.references.push_back(reference("b.png"));
  r.references.push_back(pictures::read_reference(wav, "reference 2", 2.0));
  ASSERT_TRUE(r.references[1].is_audio());
  test::expect_embeddings_give_the_prompts_clip(*test::open_conditioning_model(1, /*ref2va=*/true), r,
                                                embeds);
  // Without the sound, the presentation lacks its "<Audio 1>: " label.
  const test::CliRun unlabelled =
      test::run_h3("encode-prompt --model '" + vector_model() + "' --prompt '" + kPrompt + "' --reference '" +
                   data("b.png") + "' --frames 22 --out '" + dir / "image_only.safetensors" + "'");
  ASSERT_EQ(unlabelled.code, 0) << unlabelled.output;
  EXPECT_LT(test::read_tensors(dir / "image_only.safetensors").at("tags").size(0), t.at("tags").size(0));
  const test::CliRun refused =
      test::run_h3("encode-prompt --model '" + vector_model() + "' --prompt x --reference '" + data("b.png") +
                   "' --first-frame '" + data("b.png") + "' --out x");
  EXPECT_NE(refused.code, 0);
  EXPECT_NE(refused.output.find("different tasks"), std::string::npos) << refused.output;
}

}  // namespace
}  // namespace h3
