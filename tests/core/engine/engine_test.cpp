// The engine end to end on the tiny default model, at 1 and 2 ranks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "common/cpu_block_cache.h"
#include "engine_test_util.h"
#include "io/safetensors.h"
#include "text/prompt_encoder.h"
#include "vae/tiling.h"

namespace h3 {
namespace {

using test::CollectSink;
using test::open_tiny;

GenerationRequest small(const std::string& prompt, uint64_t seed) {
  GenerationRequest r;
  r.prompt = prompt;
  r.width = 80;       // canvas 96: cropped
  r.height = 48;      // canvas 64: cropped
  r.num_frames = 30;  // generated as 39 and trimmed
  r.steps = 3;
  r.seed = seed;
  return r;
}

struct Outcome {
  at::Tensor frames, video, audio;
  std::vector<Progress> progress;
  size_t chunks = 0;
};

Outcome generate_one(Engine& e, const GenerationRequest& r) {
  CollectSink sink;
  Outcome out;
  StreamControl cancel;
  const GenerateExtras x = test::keep_latents(&out.video, &out.audio);
  const auto caller = std::this_thread::get_id();
  e.generate(
      r, sink,
      [&](const Progress& p) {
        EXPECT_EQ(std::this_thread::get_id(), caller) << "progress must run on the calling thread";
        out.progress.push_back(p);
      },
      cancel, x);
  EXPECT_TRUE(sink.seen_final);
  out.frames = sink.all();
  out.chunks = sink.chunks.size();
  return out;
}

class EngineTiny : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    one_ = open_tiny(1).release();
    two_ = open_tiny(2).release();
  }
  static void TearDownTestSuite() {
    delete one_;
    delete two_;
  }
  static Engine* one_;
  static Engine* two_;
};
Engine* EngineTiny::one_ = nullptr;
Engine* EngineTiny::two_ = nullptr;

TEST_F(EngineTiny, DeliversExactlyTheRequestedFramesAndSize) {
  for (Engine* e : {one_, two_}) {
    const GenerationRequest r = small("a lighthouse at dusk", 1);
    const ClipPlan p = e->plan(r);
    EXPECT_EQ(p.canvas_width, 96);
    EXPECT_EQ(p.canvas_height, 64);
    EXPECT_EQ(p.generated_frames, 39);
    EXPECT_EQ(p.latent_frames, 12);
    EXPECT_EQ(p.total_chunks, 2);  // 17 + 13 of the 17 + 17 + 5 decoded
    const Outcome out = generate_one(*e, r);
    EXPECT_EQ(out.frames.sizes(), (std::vector<int64_t>{30, 48, 80, 3}));
    EXPECT_EQ(static_cast<int64_t>(out.chunks), p.total_chunks);
    EXPECT_EQ(out.video.sizes(), (std::vector<int64_t>{1, 24, 12, 4, 6}));
    EXPECT_EQ(out.audio.sizes(), (std::vector<int64_t>{2 * 65, 32}));
    // Progress: conditioning, every step, every chunk, done; frames count up to the total.
    int steps = 0, chunks = 0;
    for (const auto& pr : out.progress) {
      if (pr.phase == Phase::kDenoising) ++steps;
      if (pr.phase == Phase::kDecoding && pr.chunk > 0) ++chunks;
    }
    EXPECT_EQ(steps, p.evaluations);
    EXPECT_EQ(chunks, p.total_chunks);
    ASSERT_FALSE(out.progress.empty());
    EXPECT_EQ(out.progress.back().phase, Phase::kDone);
    EXPECT_EQ(out.progress.back().frames, 30);
  }
}

// The DiT's steps reuse their large CPU blocks (common/cpu_block_cache.h), and a request keeps
// none of them once it has ended, at one rank and at two.
TEST_F(EngineTiny, ARequestReusesItsLargeBlocksAndKeepsNoneAfterwards) {
  for (Engine* e : {one_, two_}) {
    const int64_t reuses = cpu_block_cache_stats().reuses;
    // Rows enough for blocks of over 1 MiB per rank at two ranks (a head each): 17 latent frames
    // of 10 x 16 patches.
    GenerationRequest r = small("blocks kept for the next step", 2);
    r.width = 512;
    r.height = 320;
    r.num_frames = 49;
    const Outcome out = generate_one(*e, r);
    EXPECT_EQ(out.frames.size(0), 49);
    EXPECT_GT(cpu_block_cache_stats().reuses, reuses);
    EXPECT_EQ(cpu_block_cache_stats().kept_bytes, 0);
  }
}

TEST_F(EngineTiny, SameSeedAndPromptSameFramesOtherwiseDifferent) {
  const Outcome a = generate_one(*one_, small("a lighthouse at dusk", 7));
  const Outcome b = generate_one(*one_, small("a lighthouse at dusk", 7));
  const Outcome other_prompt = generate_one(*one_, small("a lighthouse at dawn", 7));
  const Outcome other_seed = generate_one(*one_, small("a lighthouse at dusk", 8));
  EXPECT_TRUE(at::equal(a.frames, b.frames));
  EXPECT_TRUE(at::equal(a.video, b.video));
  EXPECT_FALSE(at::equal(a.frames, other_prompt.frames));
  EXPECT_FALSE(at::equal(a.frames, other_seed.frames));
  EXPECT_FALSE(at::equal(a.video, other_prompt.video));
}

TEST_F(EngineTiny, TwoRanksMatchOneRank) {
  const GenerationRequest r = small("two ranks", 3);
  const Outcome a = generate_one(*one_, r);
  const Outcome b = generate_one(*two_, r);
  // Tensor parallelism sums partial products in another order: within the DiT's TP tolerance.
  EXPECT_LE((a.video - b.video).abs().max().item<double>(), 1e-4);
  EXPECT_LE((a.audio - b.audio).abs().max().item<double>(), 1e-4);
  // The decode is bit-identical at any rank count for identical latents.
  const ClipPlan p = one_->plan(r);
  CollectSink s1, s2;
  StreamControl c;
  one_->decode(a.video, p, s1, {}, c);
  two_->decode(a.video, p, s2, {}, c);
  EXPECT_TRUE(at::equal(s1.all(), s2.all()));
  EXPECT_TRUE(at::equal(s1.all(), a.frames));  // and the same as generate's own decode
}

// Over 256 px wide the canvas needs two VAE tiles: at two ranks each rank decodes one and rank
// 0 gathers and stitches them, which the 96-px canvases above never reach (one tile: every rank
// decodes it itself).
TEST_F(EngineTiny, TwoRanksSplitTheTilesOfAWideCanvasAndMatchOneRank) {
  GenerationRequest r = small("a wide canvas", 11);
  r.width = 300;     // canvas 320: two 256-px tiles across
  r.height = 40;     // canvas 64
  r.num_frames = 5;  // generated as 22: a short clip keeps this cheap
  const ClipPlan p = one_->plan(r);
  ASSERT_EQ(p.canvas_width, 320);
  const vae::VaeConfig& vc = one_->model().vae;
  ASSERT_TRUE(vc.tiling);
  ASSERT_GE(vae::plan_tiles(p.canvas_height / 16, p.canvas_width / 16, vc.patch_size, vc.tiling, vc.tile_size,
                            vc.tile_overlap_min)
                .count(),
            2);
  const Outcome a = generate_one(*one_, r);
  const Outcome b = generate_one(*two_, r);
  ASSERT_EQ(a.frames.sizes(), (std::vector<int64_t>{5, 40, 300, 3}));
  ASSERT_EQ(b.frames.sizes(), a.frames.sizes());
  // The decode of identical latents: bit-identical with the tiles split over two ranks.
  CollectSink s1, s2;
  StreamControl c;
  one_->decode(a.video, p, s1, {}, c);
  two_->decode(a.video, p, s2, {}, c);
  EXPECT_TRUE(at::equal(s2.all(), s1.all()));
  EXPECT_TRUE(at::equal(s1.all(), a.frames));
  // End to end: the two-rank latents are within the DiT's TP tolerance of the one-rank ones, so
  // a few pixels may round the other way.
  EXPECT_LE((a.video - b.video).abs().max().item<double>(), 1e-4);
  const int max_diff = (a.frames.to(at::kInt) - b.frames.to(at::kInt)).abs().max().item<int>();
  std::printf("wide canvas: two ranks vs one, max |frame diff| %d\n", max_diff);
  EXPECT_LE(max_diff, 1);
}

TEST_F(EngineTiny, ServesRequestsOfDifferentShapes) {
  GenerationRequest r = small("shapes", 2);
  r.width = 40;
  r.height = 100;
  r.num_frames = 5;  // below one chunk: generated as 22, trimmed
  const Outcome out = generate_one(*two_, r);
  EXPECT_EQ(out.frames.sizes(), (std::vector<int64_t>{5, 100, 40, 3}));
  EXPECT_EQ(out.chunks, 1u);
}

// ---- cancellation and failures at 2 ranks ----

TEST_F(EngineTiny, CancelMidDenoiseStopsEveryRankAndTheEngineServesOn) {
  GenerationRequest r = small("cancel", 4);
  r.steps = 40;
  StreamControl cancel;
  CollectSink sink;
  int steps_seen = 0;
  try {
    two_->generate(
        r, sink,
        [&](const Progress& p) {
          if (p.phase == Phase::kDenoising && ++steps_seen == 2) cancel.cancel();
        },
        cancel);
    ADD_FAILURE() << "not cancelled";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCancelled) << e.what();
    // At the very step the callback cancelled in (agreed by both ranks there), not later.
    EXPECT_THAT(e.what(), ::testing::HasSubstr("during denoising (after step 2 of " +
                                               std::to_string(two_->plan(r).evaluations) + ")"));
  }
  EXPECT_EQ(steps_seen, 2) << "denoising went on after the cancel";
  EXPECT_TRUE(sink.chunks.empty());
  // Every rank left the cancelled request: the next one runs through on all of them.
  cancel.reset();
  const Outcome after = generate_one(*two_, small("cancel", 4));
  EXPECT_EQ(after.frames.size(0), 30);
}

TEST_F(EngineTiny, CancelMidDecodeStopsAtTheNextChunkBoundary) {
  GenerationRequest r = small("cancel decode", 5);
  r.num_frames = 100;  // 6 chunks
  StreamControl cancel;
  struct CancellingSink : CollectSink {
    StreamControl* token = nullptr;
    void on_chunk(const Chunk& c) override {
      CollectSink::on_chunk(c);
      token->cancel();
    }
  } sink;
  sink.token = &cancel;
  try {
    two_->generate(r, sink, {}, cancel);
    ADD_FAILURE() << "not cancelled";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCancelled) << e.what();
    EXPECT_THAT(e.what(), ::testing::HasSubstr("decoding"));
  }
  EXPECT_EQ(sink.chunks.size(), 1u);
  cancel.reset();
  EXPECT_EQ(generate_one(*two_, small("after", 5)).frames.size(0), 30);
}

TEST_F(EngineTiny, ASinkErrorStopsAllRanksAndComesBackAsIs) {
  struct Throwing : ChunkSink {
    int calls = 0;
    void on_chunk(const Chunk&) override {
      ++calls;
      throw std::runtime_error("disk full");
    }
  } sink;
  StreamControl c;
  GenerationRequest r = small("sink error", 6);
  r.num_frames = 100;
  try {
    two_->generate(r, sink, {}, c);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "disk full");
  }
  EXPECT_EQ(sink.calls, 1);
  EXPECT_EQ(generate_one(*two_, small("after", 6)).frames.size(0), 30);
}

// ---- bad requests ----

TEST_F(EngineTiny, RequestsOutOfRangeNameTheField) {
  auto bad = [&](auto edit, const char* field) {
    GenerationRequest r = small("x", 1);
    edit(r);
    test::expect_error([&] { one_->plan(r); }, ErrorKind::kInvalidArgument, {field});
    CollectSink s;
    StreamControl c;
    test::expect_error([&] { one_->generate(r, s, {}, c); }, ErrorKind::kInvalidArgument, {field});
  };
  bad([](GenerationRequest& r) { r.width = 8; }, "width = 8");
  bad([](GenerationRequest& r) { r.width = 5000; }, "width = 5000");
  bad([](GenerationRequest& r) { r.height = -1; }, "height = -1");
  bad([](GenerationRequest& r) { r.num_frames = 5000; }, "frames = 5000");
  bad([](GenerationRequest& r) { r.num_frames = -3; }, "frames = -3");
  bad([](GenerationRequest& r) { r.steps = 1; }, "steps = 1");
  bad([](GenerationRequest& r) { r.embeds_path = "/nonexistent.safetensors"; },
      "both a prompt and an embeddings");
}

TEST_F(EngineTiny, EmbeddingsOfTheWrongWidthAreRefusedOnEveryRank) {
  test::TempDir dir("engine");
  io::write_safetensors(dir / "e.safetensors", {{"embeds", at::zeros({4, 5})}});
  GenerationRequest r = small("", 1);
  r.embeds_path = dir / "e.safetensors";
  CollectSink s;
  StreamControl c;
  test::expect_error([&] { two_->generate(r, s, {}, c); }, ErrorKind::kMismatch,
                     {"e.safetensors", "[4, 5]", "text_dim"});
  // Embeddings of the right width condition the tiny model too.
  io::write_safetensors(dir / "ok.safetensors", {{"embeds", at::randn({4, two_->model().dit.text_dim})}});
  r.embeds_path = dir / "ok.safetensors";
  two_->generate(r, s, {}, c);
  EXPECT_EQ(s.frames_so_far, 30);
}

TEST_F(EngineTiny, TheDefaultsComeFromTheModel) {
  GenerationRequest r;
  r.prompt = "defaults";
  const ClipPlan p = one_->plan(r);
  EXPECT_EQ(p.width, one_->model().defaults.width);
  EXPECT_EQ(p.height, one_->model().defaults.height);
  EXPECT_EQ(p.num_frames, one_->model().defaults.num_frames);
  EXPECT_EQ(p.steps, one_->model().defaults.steps);
}

TEST_F(EngineTiny, APromptConditionsLikeItsEncodedEmbeddings) {
  // The tiny default's own prompt path (tokenizer/ + text_encoder/) against the file
  // `h3 encode-prompt` writes from the same folder: the same frames, at 1 and 2 ranks.
  ASSERT_TRUE(one_->model().prompt_encoder);
  const auto pe = text::PromptEncoder::load(one_->model().dir);
  EXPECT_EQ(pe.encoder().layer(), 2);  // model_index.json's text_encoder_layer
  const text::Conditioning c = pe.encode("a red kite over the dunes");
  test::TempDir dir("engine");
  io::write_safetensors(dir / "e.safetensors", {{"embeds", c.embeds}, {"tags", c.tags}});
  GenerationRequest by_file = small("", 5);
  by_file.embeds_path = dir / "e.safetensors";
  const Outcome a = generate_one(*one_, small("a red kite over the dunes", 5));
  const Outcome b = generate_one(*one_, by_file);
  EXPECT_TRUE(at::equal(a.frames, b.frames));
  EXPECT_TRUE(at::equal(a.video, b.video));
  const Outcome two = generate_one(*two_, small("a red kite over the dunes", 5));
  EXPECT_LE((two.video - a.video).abs().max().item<double>(), 1e-4);
}

TEST_F(EngineTiny, FreeingTheTextEncoderAfterEachPromptChangesNoFrame) {
  // free_text_encoder: the weights are dropped after each prompt and read again for the next
  // one, on both ranks; the frames are those of the engine that keeps them.
  EngineOptions o;
  o.model_dir = default_model_dir();
  o.ranks = 2;
  o.timeout = std::chrono::seconds(60);
  o.free_text_encoder = true;
  auto freeing = Engine::open(o);
  const Outcome kite = generate_one(*freeing, small("a red kite over the dunes", 5));
  const Outcome owl = generate_one(*freeing, small("an owl in the rain", 6));
  const Outcome kite_again = generate_one(*freeing, small("a red kite over the dunes", 5));
  EXPECT_TRUE(at::equal(kite.frames, generate_one(*two_, small("a red kite over the dunes", 5)).frames));
  EXPECT_TRUE(at::equal(owl.frames, generate_one(*two_, small("an owl in the rain", 6)).frames));
  EXPECT_TRUE(at::equal(kite.frames, kite_again.frames));
}

TEST_F(EngineTiny, AFreedTextEncoderThatCannotBeReadAgainFailsEveryRankAndServesOn) {
  // A copy of the tiny model whose encoder checkpoint disappears after the first prompt: the next
  // prompt fails on both ranks naming the file; once it is back, prompts work again.
  test::TempDir dir("engine-free");
  const std::filesystem::path model = dir / "model";
  std::filesystem::copy(default_model_dir(), model, std::filesystem::copy_options::recursive);
  EngineOptions o;
  o.model_dir = model.string();
  o.ranks = 2;
  o.timeout = std::chrono::seconds(60);
  o.free_text_encoder = true;
  auto freeing = Engine::open(o);
  const Outcome first = generate_one(*freeing, small("a red kite over the dunes", 5));
  const std::filesystem::path weights = model / "text_encoder" / "model.safetensors";
  ASSERT_TRUE(std::filesystem::exists(weights));
  std::filesystem::rename(weights, dir / "moved.safetensors");
  CollectSink s;
  StreamControl c;
  test::expect_error([&] { freeing->generate(small("a red kite over the dunes", 5), s, {}, c); },
                     ErrorKind::kNotFound, {"text_encoder"});
  EXPECT_EQ(s.frames_so_far, 0);
  std::filesystem::rename(dir / "moved.safetensors", weights);
  const Outcome again = generate_one(*freeing, small("a red kite over the dunes", 5));
  EXPECT_TRUE(at::equal(first.frames, again.frames));
}

TEST_F(EngineTiny, BadPromptsFailEveryRankAndTheEngineServesOn) {
  CollectSink s;
  StreamControl c;
  GenerationRequest r = small("ok \xFF", 1);
  test::expect_error([&] { two_->generate(r, s, {}, c); }, ErrorKind::kInvalidArgument,
                     {"invalid UTF-8 at byte offset 3"});
  r.prompt = "";
  test::expect_error([&] { two_->generate(r, s, {}, c); }, ErrorKind::kInvalidArgument, {"empty"});
  CollectSink fine;
  two_->generate(small("after the errors", 1), fine, {}, c);
  EXPECT_EQ(fine.frames_so_far, 30);
}

}  // namespace
}  // namespace h3
