// The temporal chunk plan (docs/h3-model.md §7.3) as a pure function.
#include "vae/chunk_plan.h"

#include <gtest/gtest.h>

#include <numeric>

#include "h3/error.h"

namespace {

using h3::vae::ChunkPlan;
using h3::vae::PartKind;
using h3::vae::plan_chunks;
using h3::vae::TemporalParams;

std::vector<int64_t> chunk_sizes(const ChunkPlan& p) {
  std::vector<int64_t> v;
  for (const auto& c : p.chunks) v.push_back(c.frames);
  return v;
}

std::vector<int64_t> repeat(int64_t n, int64_t v) {
  return std::vector<int64_t>(static_cast<size_t>(n), v);
}

std::vector<int64_t> concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(ChunkPlan, ReleaseConstants) {
  const ChunkPlan p = plan_chunks(7, TemporalParams{});
  EXPECT_EQ(p.frame_pre_padding, 3);
  EXPECT_EQ(p.tokens_chunk_size, 5);
  EXPECT_EQ(p.token_overlap, 2);
  EXPECT_EQ(p.frame_overlap, 5);
  EXPECT_EQ(p.clip_frames, 20);
  EXPECT_FALSE(p.head);
  EXPECT_FALSE(p.tail);
}

struct Row {
  int64_t t, pad_tokens, clips, total, pad_frames, output;
  std::vector<int64_t> chunks;
};

TEST(ChunkPlan, ReleaseTable) {
  // The table of docs/h3-model.md §7.3 plus the short and padded cases of the golden vectors.
  const std::vector<Row> rows = {
      {7, 0, 1, 22, 0, 22, {17, 5}},
      {12, 0, 2, 39, 0, 39, {17, 17, 5}},
      {15, 2, 3, 56, 5, 51, {17, 17, 17}},
      {37, 0, 7, 124, 0, 124, concat(repeat(7, 17), {5})},
      {62, 0, 12, 209, 0, 209, concat(repeat(12, 17), {5})},
      {65, 2, 13, 226, 5, 221, repeat(13, 17)},
      {72, 0, 14, 243, 0, 243, concat(repeat(14, 17), {5})},
      {107, 0, 21, 362, 0, 362, concat(repeat(21, 17), {5})},
      {9, 3, 2, 39, 9, 30, {17, 13}},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE("T = " + std::to_string(r.t));
    const ChunkPlan p = plan_chunks(r.t, TemporalParams{});
    EXPECT_EQ(p.pad_tokens, r.pad_tokens);
    EXPECT_EQ(p.num_clips, r.clips);
    EXPECT_EQ(p.total_frames, r.total);
    EXPECT_EQ(p.pad_frames, r.pad_frames);
    EXPECT_EQ(p.output_frames, r.output);
    EXPECT_EQ(chunk_sizes(p), r.chunks);
    // Every clip is 7 latents, and the last one ends exactly at the padded body.
    EXPECT_EQ(p.clip_token_end(p.num_clips - 1) - p.clip_token_begin(p.num_clips - 1), 7);
    EXPECT_EQ(p.body_tokens(), r.t + r.pad_tokens);
    // Chunks tile the output contiguously, and only the last is final-sized to the end.
    int64_t pos = 0;
    for (const auto& c : p.chunks) {
      EXPECT_EQ(c.first_frame, pos);
      pos += c.frames;
    }
    EXPECT_EQ(pos, p.output_frames);
  }
}

TEST(ChunkPlan, PartsOfAPaddedPlan) {
  // 65 latents: 13 mains of 17 then the 5-frame final overlap, which is all padding.
  const ChunkPlan p = plan_chunks(65, TemporalParams{});
  ASSERT_EQ(p.parts.size(), 14u);
  for (int i = 0; i < 13; ++i) {
    EXPECT_EQ(p.parts[i].kind, PartKind::kMain);
    EXPECT_EQ(p.parts[i].clip, i);
    EXPECT_EQ(p.parts[i].frames, 17);
  }
  EXPECT_EQ(p.parts[13].kind, PartKind::kOverlap);
  EXPECT_EQ(p.parts[13].clip, 12);
  EXPECT_EQ(p.chunks.size(), 13u);
  EXPECT_EQ(p.chunks.back().part, 12);
}

TEST(ChunkPlan, TooShortIsAClearError) {
  for (int64_t t : {0, 1, 2}) {
    SCOPED_TRACE("T = " + std::to_string(t));
    try {
      plan_chunks(t, TemporalParams{});
      FAIL() << "expected an error";
    } catch (const h3::Error& e) {
      EXPECT_EQ(e.kind(), h3::ErrorKind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("too short"), std::string::npos) << e.what();
    }
  }
  // The shortest latent that decodes: 3 latents -> 9 frames.
  const ChunkPlan p = plan_chunks(3, TemporalParams{});
  EXPECT_EQ(p.output_frames, 9);
  EXPECT_EQ(chunk_sizes(p), std::vector<int64_t>({9}));
}

TEST(ChunkPlan, HeadNeedsNoPrePadding) {
  // The release (clip 17, 3 pre-padding frames) never isolates the first frame.
  TemporalParams t;
  t.isolated_first_frame = true;
  EXPECT_FALSE(plan_chunks(12, t).head);
}

TemporalParams clip16() {
  TemporalParams t;
  t.clip_length = 16;  // no pre-padding: the isolated head can trigger
  t.token_drop = 3;
  return t;
}

TEST(ChunkPlan, IsolatedHead) {
  TemporalParams t = clip16();
  t.isolated_first_frame = true;
  const ChunkPlan p = plan_chunks(10, t);
  EXPECT_TRUE(p.head);
  EXPECT_EQ(p.frame_pre_padding, 0);
  EXPECT_EQ(p.tokens_chunk_size, 4);
  EXPECT_EQ(p.token_overlap, 1);
  EXPECT_EQ(p.frame_overlap, 4);
  // 9 body latents + 3 dropped = 12 = 3 clips of 4, minus one: 2 clips of 5 latents.
  EXPECT_EQ(p.pad_tokens, 0);
  EXPECT_EQ(p.num_clips, 2);
  ASSERT_EQ(p.parts.size(), 4u);
  EXPECT_EQ(p.parts[0].kind, PartKind::kHead);
  EXPECT_EQ(p.parts[0].frames, 1);
  EXPECT_EQ(chunk_sizes(p), std::vector<int64_t>({1, 16, 16, 4}));
}

TEST(ChunkPlan, IsolatedTail) {
  TemporalParams t;
  t.isolated_last_frame = true;
  // 13 latents: 12 body latents plan like T = 12, then the 1-frame tail.
  const ChunkPlan p = plan_chunks(13, t);
  EXPECT_TRUE(p.tail);
  EXPECT_EQ(p.num_clips, 2);
  EXPECT_EQ(p.parts.back().kind, PartKind::kTail);
  EXPECT_EQ(chunk_sizes(p), std::vector<int64_t>({17, 17, 5, 1}));
  // With padding, the trim takes the frames from the end, the tail frame first.
  const ChunkPlan q = plan_chunks(10, t);  // 9 body latents: 3 pad latents, 9 pad frames
  EXPECT_EQ(q.pad_tokens, 3);
  EXPECT_EQ(q.total_frames, 40);
  EXPECT_EQ(q.pad_frames, 9);
  EXPECT_EQ(chunk_sizes(q), std::vector<int64_t>({17, 14}));
}

TEST(ChunkPlan, IsolatedHeadAndTail) {
  TemporalParams t = clip16();
  t.isolated_first_frame = true;
  t.isolated_last_frame = true;
  const ChunkPlan p = plan_chunks(11, t);
  EXPECT_TRUE(p.head);
  EXPECT_TRUE(p.tail);
  EXPECT_EQ(p.num_clips, 2);
  EXPECT_EQ(chunk_sizes(p), std::vector<int64_t>({1, 16, 16, 4, 1}));
  // One clip holding both the head and the tail latent.
  const ChunkPlan q = plan_chunks(7, t);
  EXPECT_EQ(q.num_clips, 1);
  EXPECT_EQ(chunk_sizes(q), std::vector<int64_t>({1, 16, 4, 1}));
}

TEST(ChunkPlan, WithoutTokenDrop) {
  TemporalParams t;
  t.token_drop = 0;
  const ChunkPlan p = plan_chunks(10, t);
  EXPECT_EQ(p.token_overlap, 0);
  EXPECT_EQ(p.frame_overlap, 0);
  EXPECT_EQ(p.num_clips, 2);
  EXPECT_EQ(chunk_sizes(p), std::vector<int64_t>({17, 17}));
}

}  // namespace
