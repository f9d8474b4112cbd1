// Relative positions and the prompt switch's recache of the chunk-causal sampler (docs/causal.md
// "Positions" and "Prompt changes"), on the tiny golden DiT with the reference's random LoRA:
// where a moved chunk sits (exact positions), the window's keys turned by R(-d) against keys
// computed at the moved positions, an endless stream at chunk 41 seeing what it saw at chunk 8, a
// clip within the trained length unchanged bit for bit; and a recache that recomputes the kept
// chunks under the new prompt, with window 0, and alike on two ranks.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dist/world.h"
#include "dit/consistency_sampler.h"
#include "dit/layers.h"
#include "dit_test_util.h"
#include "h3/error.h"

namespace h3::dit {
namespace {

using testing::causal_dir;
using testing::max_abs_diff;
using testing::read_tensors;
using testing::tiny_with_lora;

// The reference case `name`'s request (tests/data/causal/cases.json).
CausalRequest case_request(const std::string& name, std::map<std::string, at::Tensor>* tensors = nullptr) {
  const auto& spec = testing::causal_case(name);
  const auto t = read_tensors(causal_dir() + "/" + spec["file"].get<std::string>());
  if (tensors) *tensors = t;
  return testing::causal_request(spec, t);
}

// An endless stream on a 4x4 latent canvas with the reference's text, sink 2, window 2, 2 steps.
CausalRequest endless_request() {
  CausalRequest r = case_request("k1_sink2_window2");
  r.endless = true;
  r.seed = 5;
  r.settings.steps = 2;
  return r;
}

// Another prompt: 6 rows of encoder states, the same on every call.
at::Tensor other_text() {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(77);
  return at::randn({6, 64}, gen, at::TensorOptions().dtype(at::kFloat));
}

// ---- Relative positions ----

TEST(CausalRelativePositions, AMovedChunkSitsWhereAFiniteClipsChunkDoes) {
  // The anchor: the trained clip's last whole chunk, at least 2 (whatever the sink and window).
  EXPECT_EQ(relative_anchor(4), 2);  // the tiny default (48 frames: 4 chunks)
  EXPECT_EQ(relative_anchor(8), 6);  // the release (124 frames: 8 chunks)
  EXPECT_EQ(relative_anchor(3), 2);
  EXPECT_EQ(relative_anchor(2), 2);
  // The shift of chunk c with anchor 2: 0 up to 2, then 3 for 3..5, 6 for 6..8, ..., 39 for 39..41.
  for (int64_t c = 0; c <= 2; ++c) EXPECT_EQ(relative_shift(c, false, 4, 2), 0) << c;
  const std::vector<std::pair<int64_t, int64_t>> at2{{3, 3},   {5, 3},   {6, 6},   {8, 6},   {9, 9},
                                                     {39, 39}, {40, 39}, {41, 39}, {42, 42}, {100, 99}};
  for (auto [c, d] : at2) EXPECT_EQ(relative_shift(c, false, 4, 2), d) << c;
  // With anchor 5: 0 up to 5, then 3 for 6..8, 6 for 9..11, ..., 36 for 39..41.
  for (int64_t c = 0; c <= 5; ++c) EXPECT_EQ(relative_shift(c, false, 4, 5), 0) << c;
  const std::vector<std::pair<int64_t, int64_t>> want{
      {6, 3}, {7, 3}, {8, 3}, {9, 6}, {11, 6}, {12, 9}, {39, 36}, {40, 36}, {41, 36}, {42, 39}, {100, 96}};
  for (auto [c, d] : want) EXPECT_EQ(relative_shift(c, false, 4, 5), d) << c;
  // A finite clip's tail within the trained clip (index <= trained - 1) never moves; a whole
  // chunk at that index does once it passes the anchor.
  EXPECT_EQ(relative_shift(7, true, 8, 6), 0);
  EXPECT_EQ(relative_shift(7, false, 8, 6), 3);
  EXPECT_EQ(relative_shift(8, true, 8, 6), 3);

  // A moved chunk's positions are those of chunk c - d of a finite clip, bit for bit, and every
  // row, audio and video alike, sits exactly 85 d / 3 earlier on the media clock; also when it
  // lands before the clip's start (a window chunk behind a current chunk at 0 or 1: chunk c - d
  // negative, laid out by the same rule).
  const int64_t L = 9, gh = 2, gw = 3;
  for (int64_t c = 0; c <= 60; ++c) {
    for (int64_t d = 3; d <= c + 6; d += 3) {
      const ChunkSpan moved = shifted_span(full_chunk(c), d);
      EXPECT_EQ(moved.index, c - d);
      EXPECT_EQ(moved.audio_latents(), full_chunk(c).audio_latents()) << c;
      const auto got = chunk_positions(L, moved, gh, gw);
      ASSERT_TRUE(at::equal(got, chunk_positions(L, full_chunk(c - d), gh, gw)))
          << "chunk " << c << " by " << d;
      const auto delta = chunk_positions(L, full_chunk(c), gh, gw) - got;
      EXPECT_LE((delta.select(1, 0) - 85.0 * static_cast<double>(d) / 3).abs().max().item<double>(), 1e-9);
      EXPECT_EQ(delta.narrow(1, 1, 2).abs().max().item<double>(), 0.0);
    }
  }
  EXPECT_THROW(shifted_span(full_chunk(8), 2), Error);  // not a multiple of 3: the audio would not fit
  EXPECT_THROW(shifted_span(full_chunk(8), -3), Error);
  // Chunk -1 (chunk 2 moved 3 back): 28 audio latents [-28, 0), video latents [-5, 0) at
  // t = L - 85/3 + (0, 5/3, 5/3 + 20/3, ...): the spacing of every chunk.
  const ChunkSpan before = shifted_span(full_chunk(2), 3);
  EXPECT_EQ(before.index, -1);
  EXPECT_EQ(before.audio_begin, -28);
  EXPECT_EQ(before.audio_end, 0);
  EXPECT_EQ(before.video_begin, -5);
  const auto t = chunk_positions(L, before, 1, 1).select(1, 0);
  EXPECT_DOUBLE_EQ(t[2 * 28].item<double>(), L - 85.0 / 3);
  EXPECT_DOUBLE_EQ(t[2 * 28 + 1].item<double>(), L - 85.0 / 3 + 5.0 / 3);
  EXPECT_DOUBLE_EQ(t[2 * 28 + 4].item<double>(), L - 85.0 / 3 + 5.0 / 3 + 3 * 20.0 / 3);
}

// What the DiT sees while it makes chunk c: the chunk each cache record's keys sit at (kPromptPlace: the
// prompt), then where chunk c itself sits.
struct Seen {
  std::vector<int64_t> placed;
  int64_t current = 0;
  bool operator==(const Seen& o) const { return placed == o.placed && current == o.current; }
};

std::vector<Seen> run_endless(const Transformer& model, CausalRequest r, int64_t chunks) {
  CausalSampler s(model, r);
  std::vector<Seen> seen;
  for (int64_t c = 0; c < chunks; ++c) {
    s.next([&](const ChunkSpan& span, int64_t step, int64_t, const at::Tensor&, const at::Tensor&) {
      if (step == 0) seen.push_back(Seen{s.cache().placed(), span.index - s.position_shift()});
    });
  }
  return seen;
}

TEST(CausalRelativePositions, AnEndlessStreamAtChunk41SeesWhatItSawAtChunk8) {
  const auto model = tiny_with_lora();
  CausalRequest r = endless_request();
  r.settings.relative_positions = true;
  r.settings.trained_chunks = 4;  // the tiny default's 48 frames: anchor 2
  const auto seen = run_endless(model, r, 42);
  ASSERT_EQ(seen.size(), 42u);
  constexpr int64_t P = kPromptPlace;
  // Up to the anchor nothing moves: chunk 2 sees the prompt, chunks 0 and 1 where they are.
  EXPECT_EQ(seen[2].placed, (std::vector<int64_t>{P, 0, 1}));
  EXPECT_EQ(seen[2].current, 2);
  // Chunk 8 (moved 6 back): the prompt, chunk 0 (the sink) at 0, chunks 6 and 7 at 0 and 1, itself at 2.
  EXPECT_EQ(seen[8].placed, (std::vector<int64_t>{P, 0, 0, 1}));
  EXPECT_EQ(seen[8].current, 2);
  // Chunk 41 (moved 39 back) sees the very same layout; the positions repeat every 3 chunks (the
  // audio cut's period), so chunk 40 sees chunk 7's.
  EXPECT_TRUE(seen[41] == seen[8]);
  EXPECT_TRUE(seen[40] == seen[7]);
  EXPECT_EQ(seen[40].placed, (std::vector<int64_t>{P, 0, -1, 0}));
  EXPECT_EQ(seen[40].current, 1);
  // Chunk 9 moved the window 3 more: chunks 7 and 8 from 1 and 2 to -2 and -1 (before the clip's
  // start), itself at 0; chunk 39 the same.
  EXPECT_EQ(seen[9].placed, (std::vector<int64_t>{P, 0, -2, -1}));
  EXPECT_EQ(seen[9].current, 0);
  EXPECT_TRUE(seen[39] == seen[9]);
  // Every chunk sits at 0, 1 or 2 (where the trained clip has a whole chunk), its window's chunks
  // just before it.
  for (size_t c = 0; c < seen.size(); ++c) {
    EXPECT_EQ(seen[c].current, static_cast<int64_t>(c % 3)) << c;
    if (c < 3) continue;
    ASSERT_EQ(seen[c].placed.size(), 4u) << c;
    EXPECT_EQ(seen[c].placed[2], seen[c].current - 2) << c;
    EXPECT_EQ(seen[c].placed[3], seen[c].current - 1) << c;
  }
  // Absolute positions: chunk 41 at 41, its window at 39 and 40.
  r.settings.relative_positions = false;
  const auto absolute = run_endless(model, r, 42);
  EXPECT_EQ(absolute[41].placed, (std::vector<int64_t>{P, 0, 39, 40}));
  EXPECT_EQ(absolute[41].current, 41);
}

TEST(CausalRelativePositions, TheTurnedWindowEqualsKeysComputedAtTheMovedPositions) {
  const auto model = tiny_with_lora();
  const auto& c = model.config();
  CausalRequest r = endless_request();
  // One chunk's clean rows committed at chunk 9's positions and turned 6 chunks back, against the
  // same rows committed at chunk 3's: the first layer's keys depend on the rows and their
  // positions alone, so they must agree up to fp32 rounding of the angles; the values exactly.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const auto o = at::TensorOptions().dtype(at::kFloat);
  ChunkInputs in;
  in.span = full_chunk(9);
  in.text_rows = r.text.size(0);
  in.video = at::randn({1, c.in_channels, 5, 4, 4}, gen, o);
  in.audio = at::randn({2 * in.span.audio_latents(), c.audio_in_channels}, gen, o);
  in.t_video = in.t_audio = kCleanTimestep;
  KvCache turned(c.num_layers, 1, 1), moved(c.num_layers, 1, 1);
  prefill_text(model, r.text, {}, turned);
  prefill_text(model, r.text, {}, moved);
  forward_chunk(model, in, turned, ChunkPass::kCommit);
  const at::Tensor prompt_keys = turned.keys(0).narrow(0, 0, r.text.size(0)).clone();
  move_window_back(model, turned, 6);
  in.position_shift = 6;
  forward_chunk(model, in, moved, ChunkPass::kCommit);
  EXPECT_EQ(turned.placed(), (std::vector<int64_t>{kPromptPlace, 3}));
  EXPECT_EQ(moved.placed(), turned.placed());
  const int64_t l = r.text.size(0), rows = turned.rows() - l;
  const double dk = max_abs_diff(turned.keys(0).narrow(0, l, rows), moved.keys(0).narrow(0, l, rows));
  const double scale = moved.keys(0).abs().max().item<double>();
  std::printf("turned vs computed at the moved positions, layer 0 keys: max |diff| %.3g (keys up to %.3g)\n",
              dk, scale);
  EXPECT_LE(dk, 1e-4 * std::max(1.0, scale));
  EXPECT_TRUE(at::equal(turned.values(0), moved.values(0)));
  // The prompt's record never moves.
  EXPECT_TRUE(at::equal(turned.keys(0).narrow(0, 0, l), prompt_keys));
  // And the turn is the RoPE of the moved positions: R(-d) R(p) k = R(p - d) k for any k.
  const int64_t heads = 2, d = c.head_dim;
  const auto k0 = at::randn({in.span.rows(2, 2), heads, d}, gen, o);
  auto at_p = k0.clone(), at_moved = k0.clone();
  apply_rope_(at_p, rope_table(chunk_positions(l, full_chunk(9), 2, 2), c.rope_freq_dim, c.rope_theta));
  apply_rope_(at_moved, rope_table(chunk_positions(l, full_chunk(3), 2, 2), c.rope_freq_dim, c.rope_theta));
  KvCache raw(1, 1, 1);
  raw.commit({at::zeros({1, heads, d})}, {at::zeros({1, heads, d})});
  raw.commit({at_p}, {at_p.clone()}, 9);
  move_window_back(model, raw, 6);
  const double dr = max_abs_diff(raw.keys(0).narrow(0, 1, at_p.size(0)), at_moved);
  const double kmax = at_moved.abs().max().item<double>();
  std::printf("R(-d) R(p) k vs R(p - d) k: max |diff| %.3g (k up to %.3g)\n", dr, kmax);
  EXPECT_LE(dr, 1e-4 * std::max(1.0, kmax));
}

TEST(CausalRelativePositions, AClipWithinTheTrainedLengthIsBitForBitUnchanged) {
  const auto model = tiny_with_lora();
  std::map<std::string, at::Tensor> t;
  // k4, sink 1, window 0: chunks 0-3 and the tail, chunk 4. Anchor max(5 - 2, 2) = 3.
  CausalRequest r = case_request("k4_sink1_window0", &t);
  const auto absolute = testing::causal_outputs(model, r);
  r.settings.relative_positions = true;
  r.settings.trained_chunks = 5;  // the clip is the trained length: nothing moves, the tail neither
  const auto within = testing::causal_outputs(model, r);
  ASSERT_EQ(within.size(), absolute.size());
  for (size_t i = 0; i < within.size(); ++i) EXPECT_TRUE(at::equal(within[i], absolute[i])) << "output " << i;
  // The reference's (RAVEN's) final latents still hold.
  std::vector<at::Tensor> v;
  for (size_t i = 0; i < within.size(); i += 2) v.push_back(within[i]);
  EXPECT_LE(max_abs_diff(at::cat(v, 2), t.at("final_video")), 1e-4);
  // A clip past the trained length (2 chunks: anchor 2) moves chunk 3 to 0 and the tail to 1:
  // chunks 0-2 as before, bit for bit, chunks 3 and 4 not.
  r.settings.trained_chunks = 2;
  const auto past = testing::causal_outputs(model, r);
  for (size_t i = 0; i < 6; ++i) EXPECT_TRUE(at::equal(past[i], absolute[i])) << "output " << i;
  for (size_t i = 6; i < 10; i += 2) EXPECT_FALSE(at::equal(past[i], absolute[i])) << "output " << i;
  // Relative positions without a window (every chunk kept) are refused.
  r.settings.window = std::nullopt;
  try {
    CausalSampler s(model, r);
    ADD_FAILURE() << "relative positions without a window were taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("positions = relative needs a window"), std::string::npos)
        << e.what();
  }
}

// ---- Prompt switch: recache ----

struct Switch {
  std::vector<at::Tensor> video;  // each chunk's
  int64_t forwards = 0;
  int64_t recache_bytes = 0;
  std::vector<int64_t> records;
};

// `chunks` chunks of `r`, the prompt switched to `text` before chunk `at`.
Switch run_switch(const Transformer& model, const CausalRequest& r, int64_t chunks, int64_t at,
                  const at::Tensor& text) {
  CausalSampler s(model, r);
  Switch out;
  for (int64_t c = 0; c < chunks; ++c) {
    if (c == at) s.change_text(text, {});
    out.video.push_back(s.next().video);
    out.recache_bytes = std::max(out.recache_bytes, s.recache_bytes());
  }
  out.forwards = s.forwards();
  out.records = s.cache().records();
  return out;
}

TEST(CausalRecache, TheSamePromptWithNothingEvictedRecomputesTheCacheBitForBit) {
  // With no record evicted yet, each kept chunk's commit forward saw exactly the prompt and the
  // records before it: recomputing them under the same prompt must give the same cache.
  const auto model = tiny_with_lora();
  CausalRequest r = endless_request();
  r.settings.window = 8;
  const Switch keep = run_switch(model, r, 6, 4, r.text);
  r.settings.recache_on_switch = true;
  const Switch recache = run_switch(model, r, 6, 4, r.text);
  for (size_t c = 0; c < 6; ++c) EXPECT_TRUE(at::equal(recache.video[c], keep.video[c])) << "chunk " << c;
  // The switch recomputed the 4 chunk records kept before chunk 4.
  EXPECT_EQ(recache.forwards, keep.forwards + 4);
  EXPECT_EQ(keep.recache_bytes, 0);
}

TEST(CausalRecache, ASwitchRecomputesTheKeptChunksUnderTheNewPrompt) {
  const auto model = tiny_with_lora();
  CausalRequest r = endless_request();  // sink 2, window 2
  const at::Tensor night = other_text();
  const Switch keep = run_switch(model, r, 7, 5, night);
  r.settings.recache_on_switch = true;
  const Switch recache = run_switch(model, r, 7, 5, night);
  // The same chunks before the switch; from it on the kept chunks' records differ.
  for (size_t c = 0; c < 5; ++c) EXPECT_TRUE(at::equal(recache.video[c], keep.video[c])) << "chunk " << c;
  for (size_t c = 5; c < 7; ++c) {
    EXPECT_GT(max_abs_diff(recache.video[c], keep.video[c]), 1e-4) << "chunk " << c;
  }
  // Recomputed: chunk 0 (the sink) and the window's chunks 3 and 4.
  EXPECT_EQ(recache.forwards, keep.forwards + 3);
  EXPECT_EQ(recache.records, keep.records);
  // What a recache holds: the commit inputs of at most sink - 1 + window = 3 chunks, fp32.
  const int64_t per_chunk = (24 * 5 * 4 * 4 + 2 * 29 * 32) * 4;
  EXPECT_GT(recache.recache_bytes, 0);
  EXPECT_LE(recache.recache_bytes, 3 * per_chunk);
}

TEST(CausalRecache, WithWindowZeroTheSinkIsRecomputedOrNothing) {
  const auto model = tiny_with_lora();
  const at::Tensor night = other_text();
  // Sink 1, window 0: the cache keeps only the prompt; a recache has nothing to recompute and
  // gives keep's stream bit for bit, with the same forwards.
  CausalRequest r = endless_request();
  r.settings.sink = 1;
  r.settings.window = 0;
  const Switch keep = run_switch(model, r, 5, 3, night);
  r.settings.recache_on_switch = true;
  const Switch recache = run_switch(model, r, 5, 3, night);
  for (size_t c = 0; c < 5; ++c) EXPECT_TRUE(at::equal(recache.video[c], keep.video[c])) << "chunk " << c;
  EXPECT_EQ(recache.forwards, keep.forwards);
  EXPECT_EQ(recache.recache_bytes, 0);
  // Sink 2, window 0: chunk 0's record is kept, and recomputed under the new prompt.
  r.settings.sink = 2;
  r.settings.recache_on_switch = false;
  const Switch keep2 = run_switch(model, r, 5, 3, night);
  r.settings.recache_on_switch = true;
  const Switch recache2 = run_switch(model, r, 5, 3, night);
  EXPECT_EQ(recache2.forwards, keep2.forwards + 1);
  EXPECT_GT(max_abs_diff(recache2.video[3], keep2.video[3]), 1e-4);
}

TEST(CausalRecache, RecomputesWindowChunksMovedBeforeTheClipsStart) {
  // Anchor 2: at chunk 9 the window (chunks 7 and 8) sits at -2 and -1. A recache there
  // recomputes both at those positions: one commit forward each more than keep, and the chunk
  // after the switch differs from keep's.
  CausalRequest r = endless_request();
  r.settings.relative_positions = true;
  r.settings.trained_chunks = 4;
  const auto model = tiny_with_lora();
  const at::Tensor night = other_text();
  const Switch keep = run_switch(model, r, 11, 9, night);
  r.settings.recache_on_switch = true;
  const Switch recache = run_switch(model, r, 11, 9, night);
  EXPECT_EQ(recache.forwards, keep.forwards + 3) << "the sink chunk and the two window chunks";
  for (size_t c = 0; c < 9; ++c) EXPECT_TRUE(at::equal(recache.video[c], keep.video[c])) << c;
  EXPECT_GT(max_abs_diff(recache.video[9], keep.video[9]), 1e-4);
}

TEST(CausalRecache, TwoRanksRecacheAlikeAndAsOneRank) {
  // Relative positions on and the switch after the window has moved: both at once, at TP 2.
  CausalRequest r = endless_request();
  r.settings.relative_positions = true;
  r.settings.trained_chunks = 4;
  r.settings.recache_on_switch = true;
  const at::Tensor night = other_text();
  const Switch one = run_switch(tiny_with_lora(), r, 10, 8, night);
  std::vector<Switch> two(2);
  auto results = dist::run_threads(2, [&](dist::Group& g) {
    at::set_num_threads(1);
    two[static_cast<size_t>(g.rank())] = run_switch(tiny_with_lora(&g), r, 10, 8, night);
  });
  ASSERT_EQ(results.size(), 2u);
  for (const auto& res : results) EXPECT_TRUE(res.ok) << "rank " << res.rank << ": " << res.error;
  for (size_t rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(two[rank].video.size(), 10u) << "rank " << rank;
    EXPECT_EQ(two[rank].forwards, one.forwards) << "rank " << rank;
    for (size_t c = 0; c < 10; ++c) {
      EXPECT_TRUE(at::equal(two[rank].video[c], two[0].video[c])) << "rank " << rank << " chunk " << c;
      EXPECT_LE(max_abs_diff(two[rank].video[c], one.video[c]), 1e-4) << "rank " << rank << " chunk " << c;
    }
  }
}

}  // namespace
}  // namespace h3::dit
