// The causal sampler through the engine (docs/causal.md): a clip synthesised chunk by chunk with
// a LoRA, its frames handed over as each VAE clip's latents exist (the first 17 frames after two
// chunks of synthesis, before the third starts), every streamed frame equal to the whole decode
// of the final latents and the streamed soundtrack to the whole audio decode; the same at two
// ranks; the bad inputs refused naming the setting; a cancel inside a chunk names it and leaves
// only whole chunks downstream.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "../../temp_dir.h"
#include "audio/audio_decoder.h"
#include "dit/config.h"
#include "dit/frames.h"
#include "engine/planning/memory_guard.h"
#include "engine_test_util.h"
#include "h3/error.h"
#include "io/safetensors.h"

namespace h3 {
namespace {

using test::open_tiny;
using test::tiny_lora;

GenerationRequest causal(int64_t frames, bool audio) {
  GenerationRequest r;
  r.prompt = "a red ball bouncing";
  r.num_frames = frames;
  r.seed = 11;
  r.sampler = Sampler::kCausal;
  r.lora = tiny_lora();
  r.audio = audio;
  return r;
}

// Frames, audio stretches and the order of steps and chunks as the caller sees them.
struct Outcome {
  ClipPlan plan;
  std::vector<Chunk> frames, audio;
  std::vector<std::pair<char, int64_t>> timeline;  // ('s', step) and ('c', chunk index)
  at::Tensor video_latents, audio_rows;
};

class RecordingSink : public ChunkSink {
 public:
  explicit RecordingSink(Outcome& o) : o_(o) {}
  void on_chunk(const Chunk& c) override {
    if (c.frames.defined()) {
      EXPECT_EQ(c.index, static_cast<int64_t>(o_.frames.size()));
      o_.timeline.emplace_back('c', c.index);
      o_.frames.push_back(c);
    } else {
      o_.audio.push_back(c);
    }
  }

 private:
  Outcome& o_;
};

void run(Engine& e, const GenerationRequest& r, Outcome* o, StreamControl* cancel = nullptr,
         int64_t cancel_at_step = -1) {
  StreamControl own;
  StreamControl& token = cancel ? *cancel : own;
  o->plan = e.plan(r);
  RecordingSink sink(*o);
  auto progress = [&](const Progress& p) {
    if (p.phase != Phase::kDenoising) return;
    o->timeline.emplace_back('s', p.step);
    if (p.step == cancel_at_step) token.cancel();
  };
  e.generate(r, sink, progress, token, test::keep_latents(&o->video_latents, &o->audio_rows));
}

at::Tensor all_frames(const std::vector<Chunk>& chunks) {
  std::vector<at::Tensor> f;
  for (const auto& c : chunks) f.push_back(c.frames);
  return at::cat(f, 0);
}

at::Tensor soundtrack(const std::vector<Chunk>& stretches) {
  std::vector<at::Tensor> a;
  int64_t next = 0;
  for (const auto& c : stretches) {
    EXPECT_EQ(c.first_sample, next) << "stretches must join";
    next += c.audio.size(0);
    a.push_back(c.audio);
  }
  return at::cat(a, 0);
}

// Frames equal within one u8 step on at most 0.1 % of the values.
void expect_same_frames(const at::Tensor& a, const at::Tensor& b, const char* what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const auto d = (a.to(at::kShort) - b.to(at::kShort)).abs();
  const double off = d.gt(0).sum().item<double>() / static_cast<double>(d.numel());
  std::printf("%s: max |diff| %d, %.4f %% of values differ\n", what, d.max().item<int>(), 100 * off);
  EXPECT_LE(d.max().item<int>(), 1) << what;
  EXPECT_LE(off, 1e-3) << what;
}

TEST(EngineCausal, ChunksLeaveAsTheyAreSynthesisedAndEqualTheWholeDecode) {
  auto e = open_tiny(1);
  Outcome o;
  run(*e, causal(73, true), &o);
  const ClipPlan& p = o.plan;
  EXPECT_EQ(p.sampler, Sampler::kCausal);
  EXPECT_EQ(p.causal_chunks, 5);  // 22 latents: four chunks of 5 and a tail of 2
  EXPECT_EQ(p.steps, 4);
  EXPECT_EQ(p.evaluations, 20);
  EXPECT_TRUE(p.warnings.empty());
  ASSERT_EQ(static_cast<int64_t>(o.frames.size()), p.total_chunks);
  EXPECT_EQ(all_frames(o.frames).size(0), 73);

  // The first VAE clip needs latents 0..6: chunks 0 and 1 (steps 1..8). Its 17 frames reach the
  // caller before chunk 2's first step; every later clip needs one more chunk.
  std::vector<std::pair<char, int64_t>> want;
  int64_t step = 0;
  for (int64_t s = 0; s < 8; ++s) want.emplace_back('s', ++step);
  for (int64_t c = 0; c < 3; ++c) {
    want.emplace_back('c', c);
    for (int64_t s = 0; s < 4; ++s) want.emplace_back('s', ++step);
  }
  want.emplace_back('c', 3);  // the last clip (latents 15..21) after the tail chunk
  want.emplace_back('c', 4);  // and its 5-frame overlap
  EXPECT_EQ(o.timeline, want);

  // The streamed frames are the decode of the final latents.
  ASSERT_EQ(o.video_latents.sizes(), (at::IntArrayRef{1, 24, 22, p.canvas_height / 16, p.canvas_width / 16}));
  test::CollectSink whole;
  StreamControl token;
  e->decode(o.video_latents, p, whole, {}, token);
  expect_same_frames(all_frames(o.frames), whole.all(), "streamed causal frames vs the whole decode");

  // And the streamed soundtrack the whole audio decode.
  const at::Tensor got = soundtrack(o.audio);
  ASSERT_EQ(got.size(0), p.audio_samples);
  const auto dec = audio::AudioDecoder::load(e->model().audio_vae_dir);
  const at::Tensor ref = dec.decode(o.audio_rows).narrow(1, 0, p.audio_samples).t();
  const double diff = (got - ref).abs().max().item<double>();
  std::printf("streamed causal soundtrack vs the whole decode: max |diff| = %.3g over %lld samples\n", diff,
              static_cast<long long>(got.size(0)));
  EXPECT_LE(diff, 1e-4);
  EXPECT_GT(ref.abs().max().item<double>(), 0.0);
}

TEST(EngineCausal, TwoRanksMakeTheClipOneRankMakes) {
  Outcome one, two;
  run(*open_tiny(1), causal(39, true), &one);
  run(*open_tiny(2), causal(39, true), &two);
  expect_same_frames(all_frames(one.frames), all_frames(two.frames), "causal frames, 1 vs 2 ranks");
  EXPECT_LE((one.video_latents - two.video_latents).abs().max().item<double>(), 1e-4);
  const at::Tensor a = soundtrack(one.audio), b = soundtrack(two.audio);
  ASSERT_EQ(a.sizes(), b.sizes());
  EXPECT_LE((a - b).abs().max().item<double>(), 1e-4);
}

TEST(EngineCausal, TheLoraAndTheSettingsChangeTheClip) {
  auto e = open_tiny(1);
  Outcome base, lora, window;
  GenerationRequest r = causal(39, false);
  run(*e, r, &lora);
  r.lora.clear();
  const ClipPlan p = e->plan(r);
  ASSERT_EQ(p.warnings.size(), 1u);  // allowed, with the warning that the base was not trained for it
  EXPECT_NE(p.warnings[0].find("LoRA"), std::string::npos) << p.warnings[0];
  run(*e, r, &base);
  EXPECT_GT((base.video_latents - lora.video_latents).abs().max().item<double>(), 1e-3);
  // The engine took the adapter off again: the LoRA request once more gives its own clip.
  Outcome again;
  run(*e, causal(39, false), &again);
  EXPECT_TRUE(at::equal(again.video_latents, lora.video_latents));
  // A window of 0 (every chunk sees the prompt only) makes a different third chunk.
  r = causal(39, false);
  r.window = 0;
  run(*e, r, &window);
  EXPECT_TRUE(at::equal(window.video_latents.narrow(2, 0, 5), lora.video_latents.narrow(2, 0, 5)));
  EXPECT_GT(
      (window.video_latents.narrow(2, 5, 7) - lora.video_latents.narrow(2, 5, 7)).abs().max().item<double>(),
      1e-4);
}

TEST(EngineCausal, TheEulerSamplerTakesTheLoraToo) {
  // A step-distilled LoRA's path: the ordinary sampler with an adapter, the same at two ranks.
  GenerationRequest r = causal(22, false);
  r.sampler = Sampler::kEuler;
  r.steps = 3;
  Outcome with1, with2, without;
  run(*open_tiny(1), r, &with1);
  run(*open_tiny(2), r, &with2);
  EXPECT_TRUE(with1.plan.warnings.empty());
  EXPECT_LE((with1.video_latents - with2.video_latents).abs().max().item<double>(), 1e-4);
  r.lora.clear();
  run(*open_tiny(1), r, &without);
  EXPECT_GT((with1.video_latents - without.video_latents).abs().max().item<double>(), 1e-3);
}

TEST(EngineCausal, BadSettingsAreRefusedNamingThem) {
  auto e = open_tiny(1);
  auto refused = [&](GenerationRequest r, ErrorKind kind, const std::string& words) {
    try {
      e->plan(r);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const Error& err) {
      EXPECT_EQ(err.kind(), kind) << err.what();
      EXPECT_NE(std::string(err.what()).find(words), std::string::npos) << err.what();
    }
  };
  GenerationRequest r = causal(22, false);
  r.sink = 0;
  refused(r, ErrorKind::kInvalidArgument, "sink");
  r = causal(22, false);
  r.window = -2;
  refused(r, ErrorKind::kInvalidArgument, "window");
  r = causal(22, false);
  r.steps = 65;
  refused(r, ErrorKind::kInvalidArgument, "steps");
  // An unknown sampler never reaches a request: its name is refused where it is read
  // (RequestEnums.AnUnknownNameIsRefusedWithTheNamesThereAre, Cli.BadInputsAreClearErrors).
  r = causal(22, false);
  r.lora = "/nonexistent/adapter";
  refused(r, ErrorKind::kNotFound, "/nonexistent/adapter");
  r = causal(22, false);
  r.sampler = Sampler::kEuler;
  r.video_shift = 5;
  refused(r, ErrorKind::kInvalidArgument, "causal sampler");
  // steps 0: RAVEN's 4; a window beyond the clip keeps every chunk (stated, not refused).
  r = causal(22, false);
  r.window = 64;
  EXPECT_EQ(e->plan(r).steps, 4);
}

TEST(EngineCausal, ALoraWithNanFailsEveryRankAndTheEngineServesTheNextRequest) {
  // A copy of the tiny LoRA with one NaN.
  const test::TempDir dir("nan-lora");
  std::vector<std::pair<std::string, at::Tensor>> t;
  auto f = io::SafetensorsFile::open(tiny_lora() + "/adapter_model.safetensors");
  for (const auto& info : f->tensors()) t.emplace_back(info.name, f->view(info.name).clone());
  t[3].second.view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
  io::write_safetensors(dir / "adapter_model.safetensors", t);
  auto e = open_tiny(2);
  GenerationRequest r = causal(22, false);
  r.lora = dir.str();
  Outcome bad;
  try {
    run(*e, r, &bad);
    ADD_FAILURE() << "a LoRA with NaN was accepted";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kFormat) << err.what();
    EXPECT_NE(std::string(err.what()).find(t[3].first), std::string::npos) << err.what();
  }
  EXPECT_TRUE(bad.frames.empty());
  Outcome good;
  run(*e, causal(22, false), &good);
  EXPECT_EQ(all_frames(good.frames).size(0), 22);
}

TEST(EngineCausal, ACancelInsideAChunkNamesItAndLeavesOnlyWholeChunks) {
  auto e = open_tiny(1);
  Outcome o;
  StreamControl token;
  try {
    run(*e, causal(73, true), &o, &token, /*cancel_at_step=*/10);  // chunk 3's second step
    ADD_FAILURE() << "not cancelled";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kCancelled) << err.what();
    EXPECT_NE(std::string(err.what()).find("chunk 3 of 5"), std::string::npos) << err.what();
  }
  // Only the first clip's chunk (made from chunks 1 and 2) was handed over, whole.
  ASSERT_EQ(o.frames.size(), 1u);
  EXPECT_EQ(o.frames[0].frames.size(0), 17);
}

// ---- Endless streams and prompt changes (docs/causal.md "Live") ----

// An endless request finished by the caller when chunk `n`'s frames arrive; `on_progress` sees
// every report (a prompt change may be given from there).
struct Stream {
  std::vector<Chunk> frames, audio;
  std::vector<std::pair<int64_t, double>> prompts;  // (chunk, elapsed) of each prompt applied
};

Stream run_endless(Engine& e, GenerationRequest r, int64_t n,
                   const std::function<void(const Progress&, StreamControl&)>& on_progress = {},
                   const GenerateExtras& extras = {},
                   const std::function<void(StreamControl&)>& before = {}) {
  r.num_frames = kEndless;
  Stream s;
  StreamControl token;
  if (before) before(token);  // what the caller asks before the stream starts
  class Sink : public ChunkSink {
   public:
    Sink(Stream& s, StreamControl& t, int64_t n) : s_(s), t_(t), n_(n) {}
    void on_chunk(const Chunk& c) override {
      if (!c.frames.defined()) {
        s_.audio.push_back(c);
        return;
      }
      EXPECT_FALSE(c.final);
      EXPECT_EQ(c.total_frames, -1);
      s_.frames.push_back(c);
      if (static_cast<int64_t>(s_.frames.size()) == n_) t_.finish();
    }

   private:
    Stream& s_;
    StreamControl& t_;
    int64_t n_;
  } sink(s, token, n);
  auto progress = [&](const Progress& p) {
    if (p.phase == Phase::kPrompt) s.prompts.emplace_back(p.chunk, p.elapsed_s);
    if (on_progress) on_progress(p, token);
  };
  e.generate(r, sink, progress, token, extras);
  return s;
}

TEST(EngineLive, AnEndlessStreamFinishedAfterNChunksGivesNTimes17FramesAndTheirSoundtrack) {
  auto e = open_tiny(1);
  GenerationRequest r = causal(0, true);
  r.num_frames = kEndless;
  const ClipPlan p = e->plan(r);
  EXPECT_TRUE(p.endless);
  EXPECT_EQ(p.num_frames, -1);
  EXPECT_EQ(p.total_chunks, -1);
  EXPECT_EQ(p.cache_records, 4);
  const Stream s = run_endless(*e, r, 4);
  ASSERT_EQ(s.frames.size(), 4u);  // the finish is taken at the next chunk boundary
  int64_t frames = 0;
  for (const auto& c : s.frames) {
    EXPECT_EQ(c.frames.size(0), 17);
    EXPECT_EQ(c.first_frame, frames);
    frames += c.frames.size(0);
  }
  const at::Tensor audio = soundtrack(s.audio);
  EXPECT_EQ(audio.size(0), 800 * dit::audio_latents_for(4 * 17));  // the soundtrack of the 68 frames
  EXPECT_GT(audio.abs().max().item<double>(), 0.0);
  // The same seed gives the same stream.
  const Stream again = run_endless(*e, r, 2);
  EXPECT_TRUE(at::equal(again.frames[1].frames, s.frames[1].frames));
}

TEST(EngineLive, APromptChangedWhilePlayingLandsAtTheNextChunkAndEqualsTheSameTimelineUpFront) {
  auto e = open_tiny(1);
  GenerationRequest r = causal(0, false);
  const int64_t steps = 4;
  // Live: the new prompt given during chunk 1's last step applies from chunk 2.
  const Stream live = run_endless(*e, r, 5, [&](const Progress& p, StreamControl& t) {
    if (p.phase == Phase::kDenoising && p.step == 2 * steps) t.change_prompt("a blue cube spinning");
  });
  ASSERT_EQ(live.prompts.size(), 1u);
  EXPECT_EQ(live.prompts[0].first, 2);
  // Up front: the same change as a timeline entry at chunk 2's start (34 / 24 s).
  GenerationRequest timed = r;
  timed.prompt_timeline = {{dit::chunk_start_seconds(2), "a blue cube spinning"}};
  const Stream up_front = run_endless(*e, timed, 5);
  ASSERT_EQ(up_front.prompts.size(), 1u);
  EXPECT_EQ(up_front.prompts[0].first, 2);
  ASSERT_EQ(live.frames.size(), up_front.frames.size());
  for (size_t i = 0; i < live.frames.size(); ++i) {
    EXPECT_TRUE(at::equal(live.frames[i].frames, up_front.frames[i].frames)) << "chunk " << i;
  }
  // And the change changed the stream: the frames after it differ from a run without it, the
  // frames before it do not.
  const Stream unchanged = run_endless(*e, r, 5);
  EXPECT_TRUE(at::equal(unchanged.frames[0].frames, live.frames[0].frames));
  EXPECT_FALSE(at::equal(unchanged.frames[3].frames, live.frames[3].frames));
}

// A change given while a chunk is being made, before its last forward, remakes that chunk under
// it (docs/causal.md "Live"): the stream is the one whose timeline changes the prompt at that
// chunk's start, on one and two ranks, with either switch mode; a chunk is remade once at most (a
// second change given in the remade chunk waits for the next), and the step reports go on counting
// up through the remake (one forward run again here).
TEST(EngineLive, APromptGivenInsideAChunkRemakesItAndEqualsTheSameTimelineUpFront) {
  const int64_t steps = 4;
  const char* kA = "a blue cube spinning";
  const char* kB = "a green field";
  struct Case {
    int ranks;
    PromptSwitch mode;
  };
  for (const Case c :
       {Case{1, PromptSwitch::kKeep}, Case{2, PromptSwitch::kKeep}, Case{1, PromptSwitch::kRecache}}) {
    const std::string name =
        std::to_string(c.ranks) + " rank(s), " + (c.mode == PromptSwitch::kKeep ? "keep" : "recache");
    auto e = open_tiny(c.ranks);
    GenerationRequest r = causal(0, false);
    r.prompt_switch = c.mode;
    std::vector<int64_t> reported;
    // Step 5 is chunk 1's first forward: A remakes chunk 1; step 6 is the remade chunk's first: B
    // waits for chunk 2.
    const Stream live = run_endless(*e, r, 4, [&](const Progress& p, StreamControl& t) {
      if (p.phase != Phase::kDenoising) return;
      reported.push_back(p.step);
      if (p.step == steps + 1) t.change_prompt(kA);
      if (p.step == steps + 2) t.change_prompt(kB);
    });
    ASSERT_EQ(live.prompts.size(), 2u) << name;
    EXPECT_EQ(live.prompts[0].first, 1) << name;
    EXPECT_EQ(live.prompts[1].first, 2) << name;
    // Four chunks delivered are five made (chunk 3's frames read chunk 4's first latents), and one
    // forward of chunk 1 ran twice.
    ASSERT_EQ(reported.size(), static_cast<size_t>(5 * steps + 1)) << name;
    for (size_t i = 0; i < reported.size(); ++i) EXPECT_EQ(reported[i], static_cast<int64_t>(i + 1)) << name;
    GenerationRequest timed = r;
    timed.prompt_timeline = {{dit::chunk_start_seconds(1), kA}, {dit::chunk_start_seconds(2), kB}};
    const Stream up_front = run_endless(*e, timed, 4);
    ASSERT_EQ(live.frames.size(), 4u) << name;
    ASSERT_EQ(up_front.frames.size(), 4u) << name;
    for (size_t i = 0; i < live.frames.size(); ++i) {
      EXPECT_TRUE(at::equal(live.frames[i].frames, up_front.frames[i].frames)) << name << ", chunk " << i;
    }
  }
}

TEST(EngineLive, APromptChangeWithTheTextEncoderFreedReadsItAgain) {
  EngineOptions o;
  o.model_dir = default_model_dir();
  o.free_text_encoder = true;
  auto freed = Engine::open(o);
  GenerationRequest r = causal(0, false);
  r.prompt_timeline = {{1.0, "a green field"}};
  int64_t loads = 0;
  const Stream s = run_endless(*freed, r, 4, [&](const Progress& p, StreamControl&) {
    if (p.phase == Phase::kLoading) ++loads;
  });
  ASSERT_EQ(s.prompts.size(), 1u);
  // The same frames as an engine that kept its encoder.
  const Stream kept = run_endless(*open_tiny(1), r, 4);
  ASSERT_EQ(s.frames.size(), kept.frames.size());
  EXPECT_TRUE(at::equal(s.frames[3].frames, kept.frames[3].frames));
}

TEST(EngineLive, TwoRanksFollowAPromptChangeAsOneRankDoes) {
  GenerationRequest r = causal(0, false);
  r.prompt_timeline = {{1.0, "a green field"}};
  const Stream one = run_endless(*open_tiny(1), r, 4);
  const Stream two = run_endless(*open_tiny(2), r, 4);
  ASSERT_EQ(two.prompts.size(), 1u);
  EXPECT_EQ(two.prompts[0].first, 2);  // chunk 2 starts at 1.417 s, the first start after 1 s
  ASSERT_EQ(one.frames.size(), two.frames.size());
  expect_same_frames(one.frames[3].frames, two.frames[3].frames,
                     "chunk 4 after a prompt change, 1 vs 2 ranks");
}

// An endless stream's memory is flat: what the causal stage holds after chunk 40 (the KV cache's
// records, rows and bytes; the video and audio latents kept for the decode and the soundtrack) is
// what it held after chunk 8, and within what the memory guard reserves for it. A cache record's
// rows follow its chunk's audio (29, 28, 28 latents: 85/3 a chunk), so the cache after chunk c
// has two rows fewer when c is a multiple of 3 (chunks c-2 and c-1 then have 28 each): chunk 8
// and 40 are of the same kind, chunk 9 and 42 of the other.
TEST(EngineLive, AnEndlessStreamHoldsAtChunk40WhatItHeldAtChunk8) {
  auto e = open_tiny(1);
  GenerationRequest r = causal(0, true);
  std::vector<CausalHeld> held;
  GenerateExtras extras;
  extras.on_causal_chunk = [&](const CausalHeld& h) { held.push_back(h); };
  const Stream s = run_endless(*e, r, 42, {}, extras);
  ASSERT_EQ(s.frames.size(), 42u);
  ASSERT_GE(held.size(), 42u);
  for (size_t i = 0; i < held.size(); ++i) ASSERT_EQ(held[i].chunk, static_cast<int64_t>(i));
  auto fields = [](const CausalHeld& h) {
    return std::make_tuple(h.kv_records, h.kv_rows, h.kv_bytes, h.video_latents, h.audio_latents,
                           h.latent_bytes);
  };
  for (const size_t c : {8u, 9u, 40u, 42u})
    std::printf(
        "held after chunk %zu: kv %lld records, %lld rows, %lld bytes; "
        "latents %lld video, %lld audio, %lld bytes\n",
        c, (long long)held[c].kv_records, (long long)held[c].kv_rows, (long long)held[c].kv_bytes,
        (long long)held[c].video_latents, (long long)held[c].audio_latents, (long long)held[c].latent_bytes);
  EXPECT_EQ(fields(held[40]), fields(held[8]));
  EXPECT_EQ(fields(held[42]), fields(held[9]));
  // The cache: the prompt, chunk 0 (sink 2) and the window's two chunks.
  EXPECT_EQ(held[40].kv_records, 4);
  EXPECT_EQ(held[9].kv_rows, held[8].kv_rows - 2);
  EXPECT_GT(held[40].kv_bytes, 0);
  int64_t most_video = 0, most_audio = 0;
  for (const auto& h : held) {
    most_video = std::max(most_video, h.video_latents);
    most_audio = std::max(most_audio, h.audio_latents);
  }
  EXPECT_GT(held[40].video_latents, 0);
  EXPECT_GT(held[40].audio_latents, 0)
      << "the soundtrack's latents are kept until the audio decoder passed them";
  EXPECT_LE(most_video, endless_video_latents(e->model()));
  EXPECT_LE(most_audio, endless_audio_latents(e->model()));
}

// Flat with prompt changes: a prompt of another length changes the KV cache's first record and
// the sizes every forward asks for. Prompt A from chunk 12, 24 and 36 (B, C and D, three other
// lengths, in between): what the stream holds after chunk 41 (the cache, the latents, and the
// CPU block cache's kept blocks and tracked sizes) is what it held after chunk 17: the same
// prompt for as long before it, the same place in the rows' 3-chunk cycle. A block cache that
// kept the sizes of every prompt it saw fails it.
TEST(EngineLive, AStreamWithPromptChangesHoldsAtChunk41WhatItHeldAtChunk17) {
  auto e = open_tiny(1);
  GenerationRequest r = causal(0, true);
  const std::string a = "a red circle moving right on a black background";
  r.prompt = a;
  r.prompt_timeline = {
      {dit::chunk_start_seconds(6), "a blue square"},
      {dit::chunk_start_seconds(12), a},
      {dit::chunk_start_seconds(18), "a green triangle bouncing on a gray background at night, slowly"},
      {dit::chunk_start_seconds(24), a},
      {dit::chunk_start_seconds(30), "an orange square moving down"},
      {dit::chunk_start_seconds(36), a}};
  std::vector<CausalHeld> held;
  GenerateExtras extras;
  extras.on_causal_chunk = [&](const CausalHeld& h) { held.push_back(h); };
  const Stream s = run_endless(*e, r, 42, {}, extras);
  ASSERT_EQ(s.frames.size(), 42u);
  ASSERT_EQ(s.prompts.size(), 6u);
  ASSERT_GE(held.size(), 42u);
  auto fields = [](const CausalHeld& h) {
    return std::make_tuple(h.kv_records, h.kv_rows, h.kv_bytes, h.video_latents, h.audio_latents,
                           h.latent_bytes, h.cached_block_bytes, h.cached_block_sizes);
  };
  for (const size_t c : {17u, 23u, 29u, 35u, 41u})
    std::printf(
        "held after chunk %zu: kv %lld rows, %lld bytes; latents %lld bytes; block cache %lld bytes, %lld "
        "sizes\n",
        c, (long long)held[c].kv_rows, (long long)held[c].kv_bytes, (long long)held[c].latent_bytes,
        (long long)held[c].cached_block_bytes, (long long)held[c].cached_block_sizes);
  EXPECT_EQ(fields(held[41]), fields(held[17]));
  EXPECT_EQ(fields(held[29]), fields(held[17]));
  // The other prompts' lengths differ from A's: the prompt's record is what changed.
  EXPECT_NE(held[23].kv_rows, held[17].kv_rows);
  EXPECT_NE(held[35].kv_rows, held[17].kv_rows);
}

// ---- Timelines of several entries and changes due at one boundary (docs/causal.md "Live") ----

// A 73-frame causal clip (chunks 0-3 of 5 latents, chunk 4 the 2-latent tail; chunk c starts at
// c * 17 / 24 s: 0, 0.708, 1.417, 2.125, 2.833) and the chunks its prompt changes applied at.
struct Switched {
  at::Tensor video;                       // final latents [1, C, 22, h, w]
  std::vector<int64_t> prompts;           // Phase::kPrompt's chunks
  std::vector<std::string> prompt_texts;  // and the prompts it reported taken (the marking records them)
  at::Tensor chunk(int64_t c) const {
    return video.narrow(2, 5 * c, std::min<int64_t>(5, video.size(2) - 5 * c));
  }
};

Switched run_switched(Engine& e, const std::vector<TimedPrompt>& timeline,
                      const std::function<void(const Progress&, StreamControl&)>& on_progress = {},
                      const std::function<void(StreamControl&)>& before = {}) {
  GenerationRequest r = causal(73, false);
  r.prompt_timeline = timeline;
  Switched out;
  at::Tensor audio;
  StreamControl token;
  if (before) before(token);
  test::CollectSink sink;
  auto progress = [&](const Progress& p) {
    if (p.phase == Phase::kPrompt) {
      out.prompts.push_back(p.chunk);
      out.prompt_texts.push_back(p.prompt);
    }
    if (on_progress) on_progress(p, token);
  };
  e.generate(r, sink, progress, token, test::keep_latents(&out.video, &audio));
  EXPECT_EQ(out.video.size(2), 22);
  return out;
}

const std::string kP1 = "a blue cube spinning", kP2 = "a green field at night";

TEST(EngineLive, ATimelineOfSeveralEntriesTakesEachPromptAtItsChunk) {
  auto e = open_tiny(1);
  const Switched first = run_switched(*e, {});
  // kP1 from chunk 1 (0.708 s is the first start at or after 0.5 s), kP2 from chunk 3 (2.125 s).
  const Switched both = run_switched(*e, {{0.5, kP1}, {1.9, kP2}});
  EXPECT_EQ(both.prompts, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(both.prompt_texts, (std::vector<std::string>{kP1, kP2}));
  const Switched one = run_switched(*e, {{0.5, kP1}});
  EXPECT_EQ(one.prompts, (std::vector<int64_t>{1}));
  // Before the first switch: the first prompt's chunk, bit for bit; from it on, another.
  EXPECT_TRUE(at::equal(both.chunk(0), first.chunk(0)));
  for (int64_t c = 1; c < 5; ++c) EXPECT_FALSE(at::equal(both.chunk(c), first.chunk(c))) << "chunk " << c;
  // Until the second switch: the stream switched to kP1 alone; from it on, another.
  for (int64_t c = 0; c < 3; ++c) EXPECT_TRUE(at::equal(both.chunk(c), one.chunk(c))) << "chunk " << c;
  for (int64_t c = 3; c < 5; ++c) EXPECT_FALSE(at::equal(both.chunk(c), one.chunk(c))) << "chunk " << c;
  // The same two changes given live, up front, make the same clip.
  const Switched live = run_switched(*e, {}, {}, [](StreamControl& t) {
    t.change_prompt(kP1, 0.5);
    t.change_prompt(kP2, 1.9);
  });
  EXPECT_EQ(live.prompts, (std::vector<int64_t>{1, 3}));
  EXPECT_TRUE(at::equal(live.video, both.video));
}

TEST(EngineLive, OfTimelineEntriesDueAtOneBoundaryTheLatestWins) {
  auto e = open_tiny(1);
  // 0.2 s and 0.6 s are both due at chunk 1 (0.708 s): kP2 takes it, kP1 never applies.
  const Switched two = run_switched(*e, {{0.2, kP1}, {0.6, kP2}});
  EXPECT_EQ(two.prompts, (std::vector<int64_t>{1}));
  const Switched p2 = run_switched(*e, {{0.7, kP2}});
  const Switched p1 = run_switched(*e, {{0.7, kP1}});
  EXPECT_TRUE(at::equal(two.video, p2.video));
  EXPECT_FALSE(at::equal(two.chunk(1), p1.chunk(1)));
}

TEST(EngineLive, ALiveChangeWinsOverATimelineEntryDueAtTheSameBoundaryAndTheTimelineGoesOn) {
  auto e = open_tiny(1);
  const int64_t steps = 4;
  // kP2 given live during chunk 0's last step: due at chunk 1, as the timeline's kP1 at 0.6 s.
  const auto live_p2 = [&](const Progress& p, StreamControl& t) {
    if (p.phase == Phase::kDenoising && p.step == steps) t.change_prompt(kP2);
  };
  const Switched both = run_switched(*e, {{0.6, kP1}}, live_p2);
  EXPECT_EQ(both.prompts, (std::vector<int64_t>{1}));
  EXPECT_EQ(both.prompt_texts, (std::vector<std::string>{kP2}));  // the winner is what was taken
  // The clip of kP2 alone from chunk 1: the timeline's kP1 was dropped, not deferred.
  const Switched p2 = run_switched(*e, {{0.6, kP2}});
  EXPECT_TRUE(at::equal(both.video, p2.video));
  // A timeline entry due later still takes over at its own chunk after the live change.
  const Switched later = run_switched(*e, {{0.6, kP1}, {1.9, kP1}}, live_p2);
  EXPECT_EQ(later.prompts, (std::vector<int64_t>{1, 3}));
  const Switched scripted = run_switched(*e, {{0.6, kP2}, {1.9, kP1}});
  EXPECT_TRUE(at::equal(later.video, scripted.video));
}

TEST(EngineLive, BadStreamsAreRefusedNamingTheSetting) {
  auto e = open_tiny(1);
  auto refused = [&](GenerationRequest r, const std::string& words) {
    try {
      e->plan(r);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const Error& err) {
      EXPECT_EQ(err.kind(), ErrorKind::kInvalidArgument) << err.what();
      EXPECT_NE(std::string(err.what()).find(words), std::string::npos) << err.what();
    }
  };
  GenerationRequest r = causal(0, false);
  r.num_frames = kEndless;
  r.sampler = Sampler::kEuler;
  refused(r, "causal sampler");
  r = causal(0, false);
  r.num_frames = kEndless;
  r.window = -1;
  refused(r, "without bound");
  r = causal(73, false);
  r.prompt_timeline = {{2.0, "a"}, {1.0, "b"}};
  refused(r, "entry 2 at 1.0");
  r.prompt_timeline = {{2.0, ""}};
  refused(r, "empty prompt");
  r = causal(73, false);
  r.sampler = Sampler::kEuler;
  r.prompt_timeline = {{2.0, "b"}};
  refused(r, "causal sampler");
  // Steps that may change while streaming (pace): the causal sampler only, at most its steps.
  r = causal(0, false);
  r.num_frames = kEndless;
  r.min_steps = 5;
  refused(r, "min-steps = 5: must be within 1..4");
  r = causal(73, false);
  r.sampler = Sampler::kEuler;
  r.lora.clear();
  r.min_steps = 2;
  refused(r,
          "min-steps = 2: lowering the forwards per chunk while streaming (pace) needs the causal sampler");
}

// Live step changes (StreamControl::change_steps; docs/causal.md "Keeping pace"): `changes` maps a
// denoising step report (the running count of noise forwards) to the count asked for there.
struct Paced {
  Stream stream;
  std::vector<std::pair<int64_t, int64_t>> applied;  // (chunk, steps) of each Phase::kSteps
  std::vector<int64_t> steps;                        // every denoising report's step, in order
};

Paced run_paced(Engine& e, const GenerationRequest& r, int64_t n,
                const std::vector<std::pair<int64_t, int64_t>>& changes) {
  Paced out;
  auto on_progress = [&](const Progress& p, StreamControl& t) {
    if (p.phase == Phase::kSteps) out.applied.emplace_back(p.chunk, p.chunk_steps);
    if (p.phase != Phase::kDenoising) return;
    out.steps.push_back(p.step);
    for (const auto& [at, steps] : changes) {
      if (at > 0 && p.step == at) t.change_steps(steps);
    }
  };
  // At 0: asked before the stream starts, taken at chunk 0's boundary.
  auto before = [&](StreamControl& t) {
    for (const auto& [at, steps] : changes) {
      if (at == 0) t.change_steps(steps);
    }
  };
  out.stream = run_endless(e, r, n, on_progress, {}, before);
  return out;
}

TEST(EngineLive, AStepChangeAppliesFromTheNextChunkOnOneAndTwoRanksAlikeAndRepeats) {
  GenerationRequest r = causal(0, false);
  r.min_steps = 2;
  // Given in chunk 0's last step (forward 4 of 4): 2 from chunk 1 (forwards 5-6), then given in
  // chunk 2's last step (forward 8): 3 from chunk 3 (forwards 9-11).
  const std::vector<std::pair<int64_t, int64_t>> changes{{4, 2}, {8, 3}};
  const std::vector<std::pair<int64_t, int64_t>> expected{{1, 2}, {3, 3}};
  auto one_rank = open_tiny(1);
  const Paced one = run_paced(*one_rank, r, 5, changes);
  const Paced two = run_paced(*open_tiny(2), r, 5, changes);
  for (const Paced* p : {&one, &two}) {
    EXPECT_EQ(p->applied, expected);
    // The reports count every forward once, in order: the chunks' counts add up.
    ASSERT_GE(p->steps.size(), 11u);
    for (size_t i = 0; i < p->steps.size(); ++i) EXPECT_EQ(p->steps[i], static_cast<int64_t>(i) + 1);
    ASSERT_EQ(p->stream.frames.size(), 5u);  // finished after 5 chunks: exactly 85 frames
    int64_t frames = 0;
    for (const auto& c : p->stream.frames) {
      EXPECT_EQ(c.first_frame, frames);
      EXPECT_EQ(c.frames.size(0), 17);
      frames += c.frames.size(0);
    }
    EXPECT_EQ(frames, 85);
  }
  // Both ranks ran the same grids (a rank on another count would fail the collectives or differ).
  expect_same_frames(all_frames(one.stream.frames), all_frames(two.stream.frames),
                     "a stream with step changes, 1 vs 2 ranks");
  // The same changes at the same chunks give the same stream.
  const Paced again = run_paced(*one_rank, r, 5, changes);
  EXPECT_EQ(again.applied, expected);
  ASSERT_EQ(again.stream.frames.size(), one.stream.frames.size());
  for (size_t i = 0; i < one.stream.frames.size(); ++i) {
    EXPECT_TRUE(at::equal(again.stream.frames[i].frames, one.stream.frames[i].frames)) << "chunk " << i;
  }
  // And they changed it: chunk 2 (made with 2 forwards) differs from the stream without changes.
  const Paced plain = run_paced(*one_rank, r, 5, {});
  EXPECT_TRUE(plain.applied.empty());
  EXPECT_FALSE(at::equal(plain.stream.frames[2].frames, one.stream.frames[2].frames));
}

TEST(EngineLive, AStepChangeStaysWithinMinStepsAndStepsAndARequestWithoutMinStepsKeepsItsSteps) {
  auto e = open_tiny(1);
  GenerationRequest r = causal(0, false);
  r.min_steps = 3;
  // 1 is below min_steps: 3 is applied; 9 above the steps: back to 4.
  const Paced clamped = run_paced(*e, r, 4, {{4, 1}, {7, 9}});
  EXPECT_EQ(clamped.applied, (std::vector<std::pair<int64_t, int64_t>>{{1, 3}, {2, 4}}));
  // A change before the first chunk makes the stream of that many steps from the start: the
  // same grid, the same draws, the same frames.
  r.min_steps = 2;
  const Paced from_start = run_paced(*e, r, 3, {{0, 2}});
  EXPECT_EQ(from_start.applied, (std::vector<std::pair<int64_t, int64_t>>{{0, 2}}));
  GenerationRequest two = r;
  two.steps = 2;
  two.min_steps = 0;
  const Paced two_steps = run_paced(*e, two, 3, {});
  ASSERT_EQ(from_start.stream.frames.size(), two_steps.stream.frames.size());
  for (size_t i = 0; i < two_steps.stream.frames.size(); ++i) {
    EXPECT_TRUE(at::equal(from_start.stream.frames[i].frames, two_steps.stream.frames[i].frames))
        << "chunk " << i;
  }
  // Without min_steps the stream keeps its 4 forwards: no change, the frames of a plain stream.
  r.min_steps = 0;
  const Paced kept = run_paced(*e, r, 3, {{4, 2}});
  EXPECT_TRUE(kept.applied.empty());
  const Paced plain = run_paced(*e, r, 3, {});
  ASSERT_EQ(kept.stream.frames.size(), plain.stream.frames.size());
  for (size_t i = 0; i < kept.stream.frames.size(); ++i) {
    EXPECT_TRUE(at::equal(kept.stream.frames[i].frames, plain.stream.frames[i].frames)) << "chunk " << i;
  }
}

}  // namespace
}  // namespace h3
