// Ref2VA through the engine (docs/conditioning.md) on the tiny model with the condition paths (`h3
// make-tiny --conditioning`: transformer_ref/, a VAE encoder, a vision tower): the size each
// reference is encoded at, the refusals of bad references and of a DiT that does not serve the
// request's task, the memory estimate's rows, and whole requests — deterministic, changed by the
// references and by their order, the same at 1 and 2 ranks.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/planning/memory_guard.h"
#include "engine/planning/plan.h"
#include "engine/process/world_settings.h"
#include "engine/stages/reference_frames.h"
#include "engine_test_util.h"
#include "h3/error.h"
#include "text/vision_prompt.h"

namespace h3 {
namespace {

namespace fs = std::filesystem;
using test::Clip;
using test::picture;
using test::refusal;

const std::string& model_dir() {
  return test::conditioning_model_dir();
}

GenerationRequest request(std::vector<Picture> references) {
  GenerationRequest r;
  r.prompt = "a red kite over a green hill";
  r.num_frames = 22;
  r.steps = 3;
  r.seed = 7;
  for (Picture& p : references) r.references.push_back({std::move(p), {}, {}});
  return r;
}

TEST(Ref2vaPlan, EachReferenceIsEncodedAtItsOwnShortEdgeAndTheCanvasStaysTheRequests) {
  const ModelInfo m = read_model(model_dir(), /*ref2va=*/true);
  EXPECT_TRUE(m.ref2va);
  EXPECT_EQ(fs::path(m.transformer_dir).filename(), "transformer_ref");
  EXPECT_EQ(m.tasks, (std::vector<std::string>{"ref2va"}));
  EXPECT_EQ(m.defaults.reference_short_edge, 96);
  // 96 x 144: 144 / 32 = 4.5 rounds to even (4): 128, not 160, as Python's round does.
  const ClipPlan p = make_plan(
      m, request({picture(96, 72, 1), picture(64, 80, 2), picture(50, 120, 3), picture(96, 144, 4)}));
  EXPECT_EQ(p.width, 256);  // the model's default canvas: references never set it
  EXPECT_EQ(p.height, 160);
  ASSERT_EQ(p.references.size(), 4u);
  const std::vector<std::pair<int64_t, int64_t>> want{{128, 96}, {96, 128}, {96, 224}, {96, 128}};
  int64_t rows = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(p.references[i].width, want[i].first) << i;
    EXPECT_EQ(p.references[i].height, want[i].second) << i;
    rows += (want[i].first / 32) * (want[i].second / 32);
  }
  EXPECT_EQ(p.condition_rows, rows);
  EXPECT_GT(p.vision_rows, 4 * 10);  // a vision block and a label per reference
  EXPECT_TRUE(p.keyframe_anchors.empty());
  // A canvas given with both sides is kept.
  GenerationRequest sized = request({picture(96, 72, 1)});
  sized.width = 192;
  sized.height = 192;
  const ClipPlan q = make_plan(m, sized);
  EXPECT_EQ(q.canvas_width, 192);
  EXPECT_EQ(q.canvas_height, 192);
  EXPECT_EQ(q.references[0].width, 128);
}

TEST(Ref2vaFrames, AVideoIsResampledCutAndReadAsThePipelineDoes) {
  // 48 frames at 30 fps: 38 on 24 fps, frames 2, 7, ..., 47 dropped (shown 0 times).
  const std::vector<int64_t> r = frame_repeats(48, 30.0);
  int64_t total = 0, dropped = 0;
  for (int64_t n : r) total += n, dropped += n == 0;
  EXPECT_EQ(total, 38);
  EXPECT_EQ(dropped, 10);
  EXPECT_EQ(r[2], 0);
  EXPECT_EQ(r[47], 0);
  // 10 frames at 12 fps: each shown twice.
  EXPECT_EQ(frame_repeats(10, 12.0), std::vector<int64_t>(10, 2));
  EXPECT_EQ(encoded_frames(38), 22);
  EXPECT_EQ(encoded_frames(39), 39);
  EXPECT_EQ(encoded_frames(56), 56);
  // Shorter than one 22-frame encode: all of them, whole clips of 17 with 3 latents dropped.
  EXPECT_EQ(encoded_frames(13), 13);
  EXPECT_EQ(encoded_frames(21), 21);
  EXPECT_EQ(encoded_latent_frames(13), 2);
  EXPECT_EQ(encoded_latent_frames(17), 2);
  EXPECT_EQ(encoded_latent_frames(18), 7);
  EXPECT_EQ(encoded_latent_frames(22), 7);
  EXPECT_EQ(encoded_latent_frames(39), 12);
  EXPECT_EQ(conditioner_frames(38), (std::vector<int64_t>{0, 12, 24, 36}));
  EXPECT_EQ(conditioner_frames(22), (std::vector<int64_t>{0, 12}));
  EXPECT_EQ(block_seconds(4), (std::vector<double>{0.25, 1.25}));
  EXPECT_EQ(block_seconds(3), (std::vector<double>{0.25, 1.0}));  // the last frame repeated
  EXPECT_EQ(text::seconds_label(0.25), "<0.2 seconds>");          // halves to even, as Python
  EXPECT_EQ(text::seconds_label(1.25), "<1.2 seconds>");
  EXPECT_EQ(text::seconds_label(1.0), "<1.0 seconds>");
}

TEST(Ref2vaPlan, BadReferencesAreRefusedNamingThem) {
  const ModelInfo m = read_model(model_dir(), true);
  std::vector<Picture> ten;
  for (int i = 0; i < 10; ++i) ten.push_back(picture(64, 64, static_cast<uint64_t>(i)));
  EXPECT_NE(
      refusal(m, request(ten))
          .find("10 image, 0 video and 0 audio references: the released model reads at most 9 images, 3 "
                "videos and 3 audio references, 12 in all"),
      std::string::npos);
  EXPECT_NE(
      refusal(m, request({picture(64, 64, 1), picture(200, 40, 2, "wide.png")}))
          .find("reference 2 'wide.png' is 200x40: the released model takes aspect ratios from 1:4 to 4:1"),
      std::string::npos);
  EXPECT_NE(refusal(m, request({picture(10, 64, 1, "thin.png")}))
                .find("reference 1 'thin.png' is 10x64: each side must be at least 16"),
            std::string::npos);
  GenerationRequest both = request({picture(64, 64, 1)});
  both.first_frame = picture(64, 64, 2);
  EXPECT_NE(
      refusal(m, both).find("references (Ref2VA) and first-frame / last-frame (FL2VA) are different tasks"),
      std::string::npos);
  GenerationRequest one_side = request({picture(64, 64, 1)});
  one_side.width = 192;
  EXPECT_NE(refusal(m, one_side).find("give width and height together"), std::string::npos);
  GenerationRequest causal = request({picture(64, 64, 1)});
  causal.sampler = Sampler::kCausal;
  EXPECT_NE(refusal(m, causal).find("references condition the euler sampler only"), std::string::npos);
}

// Sound: `seconds` of a 440 Hz tone at `rate`, `channels` interleaved.
Audio tone(double seconds, int64_t rate, int64_t channels, const std::string& source = "voice.wav") {
  Audio a;
  a.source = source;
  a.rate = rate;
  a.channels = channels;
  const auto n = static_cast<int64_t>(seconds * static_cast<double>(rate));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = 0; ch < channels; ++ch)
      a.samples.push_back(
          static_cast<float>(0.5 * std::sin(2 * M_PI * 440.0 * static_cast<double>(i) / rate)));
  }
  return a;
}

// A synthetic video reference: `n` frames of w x h at fps_n / 1 (with a 2 s stereo 48 kHz
// soundtrack when `sound`).
Reference video(int64_t n, int64_t w, int64_t h, int64_t fps_n, bool sound = false) {
  Reference r;
  r.video.source = "clip.mp4";
  r.video.width = w;
  r.video.height = h;
  r.video.fps_n = fps_n;
  if (sound) r.video.soundtrack = tone(2.0, 48000, 2, "clip.mp4");
  for (int64_t i = 0; i < n; ++i) r.video.frames.push_back(picture(w, h, static_cast<uint64_t>(i)).rgb);
  return r;
}

TEST(Ref2vaPlan, AVideoReferenceIsPlannedOnItsOwnCanvasAtTwentyFourFps) {
  const ModelInfo m = read_model(model_dir(), true);
  GenerationRequest r = request({});
  r.num_frames = 39;
  r.references.push_back(video(48, 80, 64, 30, /*sound=*/true));
  const ClipPlan p = make_plan(m, r);
  ASSERT_EQ(p.references.size(), 1u);
  const PlannedReference& v = p.references[0];
  EXPECT_EQ(v.kind, ReferenceKind::kVideo);
  EXPECT_EQ(v.frames, 38);  // 48 at 30 fps
  EXPECT_EQ(v.encoded_frames, 22);
  EXPECT_EQ(v.latent_frames, 7);
  EXPECT_EQ(v.width, 192);  // 5:4 on the model's canvas rule (short edge 160)
  EXPECT_EQ(v.height, 160);
  // Its soundtrack, cut to the clip's 39 frames (int(39 / 24 * 48000) = 78000 samples), onto
  // 32 kHz (52000) and 800-sample latents (65 a channel), packed before its frames.
  EXPECT_EQ(v.audio_samples, 52000);
  EXPECT_EQ(v.audio_latents, 65);
  EXPECT_EQ(p.condition_rows, 7 * 6 * 5 + 2 * 65);
  EXPECT_TRUE(p.warnings.empty());
  // A video longer than the clip is cut to the clip's generated frames.
  r.references = {video(100, 80, 64, 24)};
  EXPECT_EQ(make_plan(m, r).references[0].frames, 39);
}

TEST(Ref2vaPlan, BadVideoReferencesAreRefusedNamingThem) {
  const ModelInfo m = read_model(model_dir(), true);
  GenerationRequest shortr = request({});
  shortr.references.push_back(video(12, 64, 64, 24));
  EXPECT_NE(refusal(m, shortr).find("reference 1 'clip.mp4' gives 12 frames at 24 fps"), std::string::npos);
  EXPECT_NE(refusal(m, shortr).find("needs at least 13"), std::string::npos);
  // 13 frames are enough: encoded whole, two latent frames.
  shortr.references = {video(13, 64, 64, 24)};
  const PlannedReference shortest = make_plan(m, shortr).references[0];
  EXPECT_EQ(shortest.frames, 13);
  EXPECT_EQ(shortest.encoded_frames, 13);
  EXPECT_EQ(shortest.latent_frames, 2);
  GenerationRequest four = request({});
  for (int i = 0; i < 4; ++i) four.references.push_back(video(24, 32, 32, 24));
  EXPECT_NE(refusal(m, four).find("0 image, 4 video and 0 audio references"), std::string::npos);
  GenerationRequest wide = request({});
  wide.references.push_back(video(24, 200, 40, 24));
  EXPECT_NE(refusal(m, wide).find("reference 1 'clip.mp4'"), std::string::npos);
  GenerationRequest no_rate = request({});
  no_rate.references.push_back(video(24, 64, 64, 0));
  EXPECT_NE(refusal(m, no_rate).find("needs a positive frame rate"), std::string::npos);
}

// Each limit at the largest request it takes: 9 images beside 3 videos of 13 frames at 24 fps
// (12 in all, each video the shortest taken), 9 images beside 3 sounds, a 4:1 and a 1:4 image,
// a 16 x 16 image; and one past each (10 images, 13 references, a 12-frame video, 257 x 64,
// 15 x 16) refused.
TEST(Ref2vaPlan, EachLimitTakesItsLargestRequestAndRefusesOneMore) {
  const ModelInfo m = read_model(model_dir(), true);
  std::vector<Picture> nine;
  for (int i = 0; i < 9; ++i) nine.push_back(picture(64, 64, static_cast<uint64_t>(i)));
  GenerationRequest most = request(nine);
  for (int i = 0; i < 3; ++i) most.references.push_back(video(13, 64, 64, 24));
  const ClipPlan p = make_plan(m, most);
  ASSERT_EQ(p.references.size(), 12u);
  for (size_t i = 0; i < 9; ++i) EXPECT_EQ(p.references[i].kind, ReferenceKind::kImage) << i;
  for (size_t i = 9; i < 12; ++i) {
    EXPECT_EQ(p.references[i].kind, ReferenceKind::kVideo) << i;
    EXPECT_EQ(p.references[i].frames, 13) << i;
    EXPECT_EQ(p.references[i].latent_frames, 2) << i;
  }
  Reference voice;
  voice.audio = tone(0.5, 16000, 1);
  GenerationRequest sounds = request(nine);
  for (int i = 0; i < 3; ++i) sounds.references.push_back(voice);
  EXPECT_EQ(make_plan(m, sounds).references.size(), 12u);
  GenerationRequest ten = request(nine);
  ten.references.push_back({picture(64, 64, 9), {}, {}});
  EXPECT_EQ(
      refusal(m, ten),
      "10 image, 0 video and 0 audio references: the released model reads at most 9 images, 3 videos and 3 "
      "audio references, 12 in all; leave some out");
  most.references.push_back(voice);
  EXPECT_EQ(
      refusal(m, most),
      "9 image, 3 video and 1 audio references: the released model reads at most 9 images, 3 videos and 3 "
      "audio references, 12 in all; leave some out");
  GenerationRequest twelve_frames = request({});
  twelve_frames.references.push_back(video(12, 64, 64, 24));
  EXPECT_EQ(refusal(m, twelve_frames).rfind("reference 1 'clip.mp4' gives 12 frames at 24 fps", 0), 0u);
  // 4:1 and 1:4 at the reference short edge (96): 384 x 96 and 96 x 384; 16 x 16 at 96 x 96.
  const ClipPlan extremes =
      make_plan(m, request({picture(256, 64, 1), picture(64, 256, 2), picture(16, 16, 3)}));
  ASSERT_EQ(extremes.references.size(), 3u);
  EXPECT_EQ(std::make_pair(extremes.references[0].width, extremes.references[0].height),
            std::make_pair(384L, 96L));
  EXPECT_EQ(std::make_pair(extremes.references[1].width, extremes.references[1].height),
            std::make_pair(96L, 384L));
  EXPECT_EQ(std::make_pair(extremes.references[2].width, extremes.references[2].height),
            std::make_pair(96L, 96L));
  EXPECT_EQ(
      refusal(m, request({picture(257, 64, 1, "wide.png")})),
      "reference 1 'wide.png' is 257x64: the released model takes aspect ratios from 1:4 to 4:1; crop it");
  EXPECT_EQ(
      refusal(m, request({picture(64, 257, 1, "tall.png")})),
      "reference 1 'tall.png' is 64x257: the released model takes aspect ratios from 1:4 to 4:1; crop it");
  EXPECT_EQ(refusal(m, request({picture(15, 16, 1, "small.png")})),
            "reference 1 'small.png' is 15x16: each side must be at least 16 pixels");
}

// An audio reference alone (the generated audio's grid) and a soundtrack: cut to the clip, onto the
// VAE's 32 kHz, in 800-sample latents; labelled and packed in order.
TEST(Ref2vaPlan, SoundIsCutToTheClipResampledAndCountedInLatents) {
  const ModelInfo m = read_model(model_dir(), true);
  GenerationRequest r = request({picture(64, 64, 1)});
  Reference voice;
  voice.audio = tone(1.5, 44100, 1);
  r.references.push_back(voice);
  const ClipPlan p = make_plan(m, r);  // 22 frames: int(22 / 24 * 44100) = 40425 samples kept
  ASSERT_EQ(p.references.size(), 2u);
  const PlannedReference& a = p.references[1];
  EXPECT_EQ(a.kind, ReferenceKind::kAudio);
  EXPECT_EQ(a.width, 0);
  EXPECT_EQ(a.latent_frames, 0);
  EXPECT_EQ(a.audio_samples, 29334);  // ceil(40425 * 320 / 441)
  EXPECT_EQ(a.audio_latents, 37);     // ceil(29334 / 800)
  EXPECT_EQ(p.references[0].audio_latents, 0);
  EXPECT_EQ(p.condition_rows, 3 * 3 + 2 * 37);  // the image's 96 x 96 latent patches, then the sound
  // Shorter than the clip: all of it, at the VAE's rate already.
  r.references[1].audio = tone(0.25, 32000, 2);
  EXPECT_EQ(make_plan(m, r).references[1].audio_samples, 8000);
  EXPECT_EQ(make_plan(m, r).references[1].audio_latents, 10);
}

TEST(Ref2vaPlan, BadSoundIsRefusedNamingIt) {
  const ModelInfo m = read_model(model_dir(), true);
  Reference voice;
  voice.audio = tone(1.0, 16000, 1);
  GenerationRequest alone = request({});
  alone.references = {voice, voice};
  EXPECT_NE(
      refusal(m, alone).find("an audio reference needs at least one image or video reference beside it"),
      std::string::npos);
  GenerationRequest four = request({picture(64, 64, 1)});
  for (int i = 0; i < 4; ++i) four.references.push_back(voice);
  EXPECT_NE(refusal(m, four).find("1 image, 0 video and 4 audio references"), std::string::npos);
  GenerationRequest thirteen = request({});
  for (int i = 0; i < 9; ++i)
    thirteen.references.push_back({picture(64, 64, static_cast<uint64_t>(i)), {}, {}});
  for (int i = 0; i < 3; ++i) thirteen.references.push_back(video(24, 32, 32, 24));
  thirteen.references.push_back(voice);
  EXPECT_NE(refusal(m, thirteen).find("12 in all"), std::string::npos);
  GenerationRequest odd = request({picture(64, 64, 1)});
  Reference bad = voice;
  bad.audio.channels = 6;
  odd.references.push_back(bad);
  EXPECT_NE(refusal(m, odd).find("reference 2 'voice.wav': sound needs a positive rate and 1 or 2"),
            std::string::npos);
  bad = voice;
  bad.audio.rate = 0;
  odd.references.back() = bad;
  EXPECT_NE(refusal(m, odd).find("reference 2 'voice.wav'"), std::string::npos);
  // A rate whose resampling filters would take gigabytes.
  bad = voice;
  bad.audio.rate = 44101;
  odd.references.back() = bad;
  EXPECT_NE(refusal(m, odd).find("its rate of 44101 Hz shares too small a divisor"), std::string::npos);
  // A soundtrack is named as the video's.
  GenerationRequest track = request({});
  track.references.push_back(video(24, 32, 32, 24, /*sound=*/true));
  track.references[0].video.soundtrack.channels = 3;
  EXPECT_NE(refusal(m, track).find("reference 1's soundtrack 'clip.mp4'"), std::string::npos);
}

TEST(Ref2vaPlan, EachDitServesItsOwnTasks) {
  const ModelInfo ref = read_model(model_dir(), true), fl2va = read_model(model_dir());
  EXPECT_FALSE(fl2va.ref2va);
  EXPECT_EQ(fs::path(fl2va.transformer_dir).filename(), "transformer");
  EXPECT_EQ(task_missing(ref, request({picture(64, 64, 1)})), "");
  EXPECT_EQ(task_missing(fl2va, request({})), "");
  EXPECT_NE(task_missing(fl2va, request({picture(64, 64, 1)})).find("is not Ref2VA's DiT"),
            std::string::npos);
  EXPECT_NE(task_missing(ref, request({})).find("serves requests with references only"), std::string::npos);
  GenerationRequest keyframe = request({});
  keyframe.first_frame = picture(64, 64, 1);
  EXPECT_NE(task_missing(ref, keyframe).find("first-frame / last-frame (FL2VA)"), std::string::npos);
  // The tests' T2VA-only tiny model has no Ref2VA DiT at all.
  try {
    read_model(default_model_dir(), true);
    ADD_FAILURE() << "a model without transformer_ref/ was read as Ref2VA's";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find("has no Ref2VA DiT"), std::string::npos) << e.what();
  }
  // Ranks that would read different DiTs are refused at the door: their settings differ.
  EXPECT_NE(engine_detail::world_settings(ref, 2, "cpu", "fp32"),
            engine_detail::world_settings(fl2va, 2, "cpu", "fp32"));
}

TEST(Ref2vaPlan, TheMemoryEstimateCountsTheReferencesRowsAndEncoders) {
  const ModelInfo m = read_model(model_dir(), true);
  GenerationRequest t2va = request({});
  const ClipPlan plain = make_plan(m, t2va);
  const ClipPlan p = make_plan(m, request({picture(96, 72, 1), picture(50, 120, 3)}));
  const MemoryEstimate a = estimate_request_memory(m, plain, MemoryShape{});
  const MemoryEstimate b = estimate_request_memory(m, p, MemoryShape{});
  EXPECT_EQ(a.conditioning_bytes, 0);
  EXPECT_GT(b.conditioning_bytes, 0);
  EXPECT_EQ(b.dit_rows, a.dit_rows + p.condition_rows + p.vision_rows);
  EXPECT_GT(b.dit_bytes, a.dit_bytes);
  // Sound adds the audio encoder's weights (fp32) and about five maps of its first width over 2 s
  // of stereo at 32 kHz, and its rows.
  GenerationRequest voiced = request({picture(96, 72, 1), picture(50, 120, 3)});
  Reference voice;
  voice.audio = tone(2.0, 32000, 2);
  voiced.references.push_back(voice);
  voiced.num_frames = 48;
  GenerationRequest silent = voiced;
  silent.references.pop_back();
  const ClipPlan pv = make_plan(m, voiced), ps = make_plan(m, silent);
  const MemoryEstimate v = estimate_request_memory(m, pv, MemoryShape{}),
                       q = estimate_request_memory(m, ps, MemoryShape{});
  EXPECT_EQ(m.audio_encoder_params, 267912);  // the tiny model's encoder (4 ... 128 channels)
  const int64_t samples = pv.references[2].audio_latents * 800;
  EXPECT_EQ(v.conditioning_bytes - q.conditioning_bytes, 267912 * 4 + 5 * 2 * samples * 4 * 4);
  EXPECT_EQ(v.dit_rows, q.dit_rows + 2 * pv.references[2].audio_latents + 8);
}

TEST(Ref2vaEngine, TheReferencesConditionTheClipInTheirOrder) {
  const auto engine = test::open_conditioning_model(1, true);
  const Picture a = picture(96, 72, 1), b = picture(64, 80, 2);
  const Clip ab = test::generate_clip(*engine, request({a, b}));
  ASSERT_TRUE(ab.frames.defined());
  EXPECT_EQ(ab.frames.sizes(), (at::IntArrayRef{22, 160, 256, 3}));
  EXPECT_EQ(ab.video.sizes(), (at::IntArrayRef{1, 24, 7, 10, 16}));  // the generated rows only
  EXPECT_TRUE(at::equal(test::generate_clip(*engine, request({a, b})).video, ab.video));
  // Another order is another request; so is one reference fewer.
  EXPECT_GT(test::max_abs_diff(test::generate_clip(*engine, request({b, a})).video, ab.video), 1e-3);
  EXPECT_GT(test::max_abs_diff(test::generate_clip(*engine, request({a})).video, ab.video), 1e-3);
  // Ref2VA's DiT serves references only.
  try {
    test::generate_clip(*engine, request({}));
    ADD_FAILURE() << "a T2VA request ran on Ref2VA's DiT";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("a request without references asks for T2VA"), std::string::npos)
        << e.what();
  }
}

TEST(Ref2vaEngine, AnEngineWithFl2vasDitRefusesReferences) {
  const auto engine = test::open_conditioning_model(1);
  try {
    test::generate_clip(*engine, request({picture(96, 72, 1)}));
    ADD_FAILURE() << "references ran on FL2VA's DiT";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("references ask for Ref2VA (reference to video), which this model "
                                         "cannot do"),
              std::string::npos)
        << e.what();
  }
}

TEST(Ref2vaEngine, TwoRanksGiveOneRanksClip) {
  GenerationRequest r = request({picture(96, 72, 1), picture(50, 120, 3)});
  r.audio = true;
  test::expect_two_ranks_give_one_ranks_clip(r, /*ref2va=*/true);
}

}  // namespace
}  // namespace h3
