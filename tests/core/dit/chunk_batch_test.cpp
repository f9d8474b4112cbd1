// Several streams' chunk forwards as one batch (dit/causal.h, forward_chunks), what `h3 bench
// streams --batching` measures: each stream's rows attend only its own KV cache, so every stream
// gets the velocities and the cache records its own forward_chunk gives, up to the rounding of
// GEMMs over more rows; the streams' shapes, caches and timesteps may differ.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "dit/causal.h"
#include "dit_test_util.h"
#include "h3/error.h"

namespace h3::dit {
namespace {

using testing::golden_dir;
using testing::max_abs_diff;

constexpr double kBatchTolerance = 1e-5;

struct Stream {
  std::unique_ptr<KvCache> cache;
  ChunkInputs next;
};

// A stream of its own text (`text_rows` rows) with `committed` chunks in its cache (sink 1,
// window 1) and its next chunk's inputs at `t`, all drawn from `seed`.
Stream stream(const Transformer& m, uint64_t seed, int64_t text_rows, int64_t committed, int64_t lh,
              int64_t lw, float t) {
  const DitConfig& c = m.config();
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto randn = [&](at::IntArrayRef shape) { return at::randn(shape, gen, at::kFloat); };
  Stream s;
  s.cache = std::make_unique<KvCache>(c.num_layers, 1, 1);
  prefill_text(m, randn({text_rows, c.text_dim}), at::Tensor(), *s.cache);
  const auto chunk = [&](int64_t k, float at_t) {
    ChunkInputs in;
    in.span = full_chunk(k);
    in.text_rows = text_rows;
    in.video = randn({1, c.in_channels, in.span.video_latents(), lh, lw});
    in.audio = randn({2 * in.span.audio_latents(), c.audio_in_channels});
    in.t_video = in.t_audio = at_t;
    return in;
  };
  for (int64_t k = 0; k < committed; ++k)
    forward_chunk(m, chunk(k, kCleanTimestep), *s.cache, ChunkPass::kCommit);
  s.next = chunk(committed, t);
  return s;
}

// Three streams: two of one shape at different timesteps and caches, one of another size, text
// length and cache depth.
std::vector<Stream> three(const Transformer& m) {
  std::vector<Stream> s;
  s.push_back(stream(m, 1, 7, 2, 4, 6, 0.5f));
  s.push_back(stream(m, 2, 7, 1, 4, 6, 0.25f));
  s.push_back(stream(m, 3, 5, 0, 2, 4, 0.75f));
  return s;
}

Transformer tiny_with_lora() {
  auto m = Transformer::load(golden_dir() + "/transformer_tiny");
  m.attach_lora(testing::data_dir() + "/causal/lora");
  return m;
}

TEST(ChunkBatch, EachStreamGetsTheVelocitiesOfItsOwnForward) {
  const Transformer m = tiny_with_lora();
  std::vector<Stream> apart = three(m), batched = three(m);
  std::vector<ChunkInputs> ins;
  std::vector<KvCache*> caches;
  for (Stream& s : batched) {
    ins.push_back(s.next);
    caches.push_back(s.cache.get());
  }
  const std::vector<Velocity> together = forward_chunks(m, ins, caches, ChunkPass::kNoise);
  ASSERT_EQ(together.size(), 3u);
  for (size_t i = 0; i < apart.size(); ++i) {
    const Velocity alone = forward_chunk(m, apart[i].next, *apart[i].cache, ChunkPass::kNoise);
    ASSERT_EQ(together[i].video.sizes(), alone.video.sizes()) << "stream " << i;
    ASSERT_EQ(together[i].audio.sizes(), alone.audio.sizes()) << "stream " << i;
    EXPECT_LE(max_abs_diff(together[i].video, alone.video), kBatchTolerance) << "stream " << i;
    EXPECT_LE(max_abs_diff(together[i].audio, alone.audio), kBatchTolerance) << "stream " << i;
    // The velocities are those of this stream's own cache, not any other's.
    for (size_t j = 0; j < apart.size(); ++j) {
      if (j == i || apart[j].next.video.sizes() != apart[i].next.video.sizes()) continue;
      const Velocity other = forward_chunk(m, apart[i].next, *apart[j].cache, ChunkPass::kNoise);
      EXPECT_GT(max_abs_diff(other.video, alone.video), 1e-3) << "streams " << i << " and " << j;
    }
    EXPECT_EQ(batched[i].cache->records(), apart[i].cache->records()) << "a noise forward changed a cache";
  }
}

TEST(ChunkBatch, ACommitBatchAddsEachStreamsRecordToItsOwnCache) {
  const Transformer m = tiny_with_lora();
  std::vector<Stream> apart = three(m), batched = three(m);
  std::vector<ChunkInputs> ins;
  std::vector<KvCache*> caches;
  for (Stream& s : batched) {
    ins.push_back(s.next);
    caches.push_back(s.cache.get());
  }
  const std::vector<Velocity> none = forward_chunks(m, ins, caches, ChunkPass::kCommit);
  ASSERT_EQ(none.size(), 3u);
  for (size_t i = 0; i < apart.size(); ++i) {
    EXPECT_FALSE(none[i].video.defined());
    forward_chunk(m, apart[i].next, *apart[i].cache, ChunkPass::kCommit);
    EXPECT_EQ(batched[i].cache->records(), apart[i].cache->records()) << "stream " << i;
    EXPECT_EQ(batched[i].cache->rows(), apart[i].cache->rows()) << "stream " << i;
    for (int64_t l = 0; l < m.config().num_layers; ++l) {
      EXPECT_LE(max_abs_diff(batched[i].cache->keys(l), apart[i].cache->keys(l)), kBatchTolerance)
          << "stream " << i << ", layer " << l;
      EXPECT_LE(max_abs_diff(batched[i].cache->values(l), apart[i].cache->values(l)), kBatchTolerance)
          << "stream " << i << ", layer " << l;
    }
  }
}

TEST(ChunkBatch, ChunksAndCachesThatDoNotPairUpAreRefused) {
  const Transformer m = tiny_with_lora();
  std::vector<Stream> s = three(m);
  try {
    forward_chunks(m, {s[0].next, s[1].next}, {s[0].cache.get()}, ChunkPass::kNoise);
    ADD_FAILURE() << "two chunks and one cache were taken";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "forward_chunks: 2 chunks and 1 caches");
  }
}

}  // namespace
}  // namespace h3::dit
