// Relative positions and the prompt switch modes through the engine on the tiny default model
// (docs/causal.md "Positions", "Prompt changes"): an endless stream's chunk 41 placed where chunk
// 8 was (auto = relative for a stream), absolute positions warned about past the trained length,
// a recache at two ranks giving one rank's stream, and the settings refused where they cannot
// apply.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../temp_dir.h"
#include "dit/config.h"
#include "engine_test_util.h"
#include "h3/error.h"
#include "h3/model_clock.h"

namespace h3 {
namespace {

using test::open_tiny;
using test::tiny_lora;

// An endless causal stream on a 64x64 canvas (4x4 latents: cheap chunks), a LoRA, seed 11.
GenerationRequest stream() {
  GenerationRequest r;
  r.prompt = "a red ball bouncing";
  r.num_frames = kEndless;
  r.width = r.height = 64;
  r.seed = 11;
  r.sampler = Sampler::kCausal;
  r.lora = tiny_lora();
  return r;
}

struct StreamRun {
  std::vector<at::Tensor> frames;  // each chunk's
  std::vector<CausalHeld> held;
};

// `r` finished once `n` chunks' frames arrived.
StreamRun run(Engine& e, const GenerationRequest& r, int64_t n) {
  StreamRun out;
  StreamControl token;
  class Sink : public ChunkSink {
   public:
    Sink(StreamRun& o, StreamControl& t, int64_t n) : o_(o), t_(t), n_(n) {}
    void on_chunk(const Chunk& c) override {
      if (!c.frames.defined()) return;
      o_.frames.push_back(c.frames);
      if (static_cast<int64_t>(o_.frames.size()) == n_) t_.finish();
    }

   private:
    StreamRun& o_;
    StreamControl& t_;
    int64_t n_;
  } sink(out, token, n);
  GenerateExtras extras;
  extras.on_causal_chunk = [&](const CausalHeld& h) { out.held.push_back(h); };
  e.generate(r, sink, {}, token, extras);
  return out;
}

TEST(EngineCausalPositions, AnEndlessStreamPlacesChunk41WhereChunk8Was) {
  auto e = open_tiny(1);
  // The tiny default's trained length: its 48 default frames, generated as 56 (4 chunks).
  EXPECT_EQ(dit::clip_chunks(e->model().defaults.num_frames), 4);
  const GenerationRequest r = stream();
  EXPECT_TRUE(e->plan(r).warnings.empty());  // auto: relative for a stream, nothing to warn of
  const StreamRun s = run(*e, r, 42);
  ASSERT_GE(s.held.size(), 42u);
  // Anchor 2: nothing moves up to chunk 2, then 3 chunks at a time (every chunk at 0, 1 or 2).
  for (int64_t c = 0; c < 42; ++c) {
    const int64_t want = c <= 2 ? 0 : (c - 2 + 2) / 3 * 3;
    EXPECT_EQ(s.held[static_cast<size_t>(c)].position_shift, want) << "chunk " << c;
  }
  EXPECT_EQ(41 - s.held[41].position_shift, 8 - s.held[8].position_shift);
  EXPECT_EQ(s.held[41].kv_rows, s.held[8].kv_rows);
  // Absolute: nothing moves, and the plan says from which chunk the positions leave the trained
  // clip's.
  GenerationRequest abs = r;
  abs.positions = CausalPositions::kAbsolute;
  const ClipPlan p = e->plan(abs);
  EXPECT_TRUE(p.warnings.empty()) << "told when chunk 3 plays, not at the start";
  EXPECT_EQ(p.positions_leave_frame, 51);
  EXPECT_EQ(
      p.positions_warning,
      "positions = absolute on an endless stream: from chunk 3 (counted from 0, 2.125 s in) its positions "
      "pass those of a clip of the model's trained length (48 frames, the model's default), where RoPE "
      "extrapolates and the picture may drift; positions = relative keeps them within (auto's choice for "
      "an endless stream)");
  const StreamRun a = run(*e, abs, 8);
  for (const auto& h : a.held) EXPECT_EQ(h.position_shift, 0) << "chunk " << h.chunk;
  // The first 3 chunks' latents are the relative stream's (chunk 3 moved 3 back there): the frames
  // of chunks 0 and 1 bit for bit (chunk 2's are decoded with chunk 3's first latents), chunk 4's not.
  for (size_t c = 0; c < 2; ++c) EXPECT_TRUE(at::equal(a.frames[c], s.frames[c])) << "chunk " << c;
  EXPECT_FALSE(at::equal(a.frames[4], s.frames[4]));
}

TEST(EngineCausalPositions, ARecacheAtTwoRanksIsOneRanksStream) {
  GenerationRequest r = stream();
  r.prompt_timeline = {{dit::chunk_start_seconds(7), "a green field at night"}};
  r.prompt_switch = PromptSwitch::kRecache;
  auto one_rank = open_tiny(1);
  const StreamRun one = run(*one_rank, r, 10);
  const StreamRun two = run(*open_tiny(2), r, 10);
  ASSERT_EQ(one.frames.size(), 10u);
  ASSERT_EQ(two.frames.size(), 10u);
  for (size_t c = 0; c < 10; ++c) {
    const auto d = (one.frames[c].to(at::kShort) - two.frames[c].to(at::kShort)).abs().max().item<int>();
    EXPECT_LE(d, 1) << "chunk " << c << ": 1 vs 2 ranks";
  }
  // The commit inputs held for it: at most sink - 1 + window = 3 chunks' (24 x 5 x 4 x 4 video
  // and 2 x 29 x 32 audio, fp32).
  for (const auto& h : one.held) EXPECT_LE(h.recache_bytes, 3 * (24 * 5 * 16 + 2 * 29 * 32) * 4) << h.chunk;
  EXPECT_GT(one.held[9].recache_bytes, 0);
  // keep: the same latents up to the switch at chunk 7, so the same frames up to chunk 5 (chunk
  // 6's are decoded with chunk 7's first latents), another stream after it.
  r.prompt_switch = PromptSwitch::kKeep;
  const StreamRun keep = run(*one_rank, r, 10);
  for (size_t c = 0; c < 6; ++c) EXPECT_TRUE(at::equal(keep.frames[c], one.frames[c])) << "chunk " << c;
  EXPECT_FALSE(at::equal(keep.frames[8], one.frames[8]));
  for (const auto& h : keep.held) EXPECT_EQ(h.recache_bytes, 0) << h.chunk;
}

TEST(EngineCausalPositions, SettingsThatCannotApplyAreRefusedNamingThem) {
  auto e = open_tiny(1);
  auto refused = [&](const GenerationRequest& r, const std::string& words) {
    try {
      e->plan(r);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const Error& err) {
      EXPECT_EQ(err.kind(), ErrorKind::kInvalidArgument) << err.what();
      EXPECT_NE(std::string(err.what()).find(words), std::string::npos) << err.what();
    }
  };
  GenerationRequest r = stream();
  r.num_frames = 73;
  r.window = -1;
  r.positions = CausalPositions::kRelative;
  refused(r, "positions = relative needs a window");
  r = stream();
  r.num_frames = 22;
  r.sampler = Sampler::kEuler;
  r.positions = CausalPositions::kRelative;
  refused(r, "positions applies to the causal sampler");
  r.positions = CausalPositions::kAuto;
  r.prompt_switch = PromptSwitch::kRecache;
  refused(r, "prompt-switch applies to the causal sampler");
  // A clip asked for absolute positions past the trained length is told; auto's clip is not.
  r = stream();
  r.num_frames = 141;
  EXPECT_TRUE(e->plan(r).positions_warning.empty());
  EXPECT_EQ(e->plan(r).positions_leave_frame, -1);
  r.positions = CausalPositions::kAbsolute;
  const ClipPlan p = e->plan(r);
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_EQ(p.positions_leave_frame, 51);
  EXPECT_EQ(p.positions_warning.rfind(
                "positions = absolute on a clip longer than the trained length: from chunk 3", 0),
            0u)
      << p.positions_warning;
  r.num_frames = 56;  // the trained length itself
  EXPECT_TRUE(e->plan(r).positions_warning.empty());
  EXPECT_EQ(e->plan(r).positions_leave_frame, -1);
}

}  // namespace
}  // namespace h3
