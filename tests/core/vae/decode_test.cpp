// The streaming decode: chunks against an independent whole-clip decode built
// from the same blocks in the released order (decode every clip, concatenate
// with the temporal blend, trim the padding), on 1, 2 and 3 ranks; the sink
// contract (owner agreement, errors at chunk boundaries).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include "dist/agree.h"
#include "dist/group.h"
#include "dist/world.h"
#include "h3/error.h"
#include "vae/pixels.h"
#include "vae/random_weights.h"
#include "vae/video_decoder.h"

namespace {

using h3::Chunk;
using h3::ChunkSink;
using h3::vae::DecodeOptions;
using h3::vae::VaeConfig;
using h3::vae::VideoDecoder;

// A one-layer decoder: 2 heads x 16 (rope on 12 dims), 2 registers.
VideoDecoder tiny_decoder(const VaeConfig& base) {
  VaeConfig c = base;
  auto tensors = h3::vae::random_decoder_tensors(c, 1234);
  auto w = h3::vae::bind_decoder_weights(c, [&](const std::string& n) { return tensors.at(n); });
  return VideoDecoder(c, w);
}

VaeConfig tiny_config() {
  VaeConfig c = h3::vae::small_config(1, 2, 16);
  c.num_register_tokens = 2;
  return c;
}

at::Tensor latents(int64_t t, int64_t h, int64_t w, uint64_t seed = 99) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randn({1, 24, t, h, w}, gen, at::TensorOptions().dtype(at::kFloat));
}

// The whole-clip decode in the released order, independent of the streaming loop:
// all clips first, then head/tail cuts, splits, blends, one concatenation and the trim.
at::Tensor reference_decode(const VideoDecoder& d, const at::Tensor& lat, bool tiling) {
  const VaeConfig& c = d.config();
  const auto plan = d.plan(lat.size(2));
  at::Tensor mean = at::tensor(c.latents_mean, at::kDouble).to(at::kFloat).view({1, -1, 1, 1, 1});
  at::Tensor std = at::tensor(c.latents_std, at::kDouble).to(at::kFloat).view({1, -1, 1, 1, 1});
  at::Tensor z = lat * std + mean;
  at::Tensor head, tail;
  if (plan.head) {
    head = z.narrow(2, 0, 1);
    z = z.narrow(2, 1, z.size(2) - 1);
  }
  if (plan.tail) {
    tail = z.narrow(2, z.size(2) - 1, 1);
    z = z.narrow(2, 0, z.size(2) - 1);
  }
  if (plan.pad_tokens > 0)
    z = at::cat({z, z.narrow(2, z.size(2) - 1, 1).repeat({1, 1, plan.pad_tokens, 1, 1})}, 2);
  const auto grid =
      h3::vae::plan_tiles(lat.size(3), lat.size(4), 16, tiling, c.tile_size, c.tile_overlap_min);
  std::vector<at::Tensor> clips;
  for (int64_t i = 0; i < plan.num_clips; ++i) {
    at::Tensor clip =
        z.narrow(2, plan.clip_token_begin(i), plan.clip_token_end(i) - plan.clip_token_begin(i));
    if (i == 0 && plan.head) clip = at::cat({head, clip}, 2);
    if (i == plan.num_clips - 1 && plan.tail) clip = at::cat({clip, tail}, 2);
    std::vector<at::Tensor> tiles;
    for (int64_t k = 0; k < grid.count(); ++k) {
      tiles.push_back(h3::vae::decode_tile(c, d.weights(), h3::vae::tile_latent(clip, grid, k)));
    }
    clips.push_back(h3::vae::stitch_tiles(tiles, grid));
  }
  std::vector<at::Tensor> out;
  at::Tensor tail_frame, overlap;
  const int64_t rt = plan.ratio_t;
  if (plan.head) {  // frame index 3 of the head latent's 4
    out.push_back(clips[0].narrow(1, rt - 1, 1));
    clips[0] = clips[0].narrow(1, rt, clips[0].size(1) - rt);
  }
  if (plan.tail) {  // the last frame of the tail latent's 4
    tail_frame = clips.back().narrow(1, clips.back().size(1) - 1, 1);
    clips.back() = clips.back().narrow(1, 0, clips.back().size(1) - rt);
  }
  for (const at::Tensor& cd : clips) {
    at::Tensor main = cd.narrow(1, 0, std::min<int64_t>(plan.clip_frames, cd.size(1)));
    main = main.narrow(1, plan.frame_pre_padding, main.size(1) - plan.frame_pre_padding);
    if (overlap.defined()) main = h3::vae::blend(overlap, main, plan.frame_overlap, 1);
    out.push_back(main);
    const int64_t rest = cd.size(1) - plan.clip_frames;
    overlap = rest > plan.frame_pre_padding
                  ? cd.narrow(1, plan.clip_frames + plan.frame_pre_padding, rest - plan.frame_pre_padding)
                  : at::Tensor();
  }
  if (overlap.defined()) out.push_back(overlap);
  if (tail_frame.defined()) out.push_back(tail_frame);
  at::Tensor dec = at::cat(out, 1);
  EXPECT_EQ(dec.size(1), plan.total_frames);
  return dec.narrow(1, 0, dec.size(1) - plan.pad_frames);
}

// Keeps every chunk and checks the metadata as chunks arrive.
struct Collector : ChunkSink {
  std::vector<Chunk> chunks;
  void on_chunk(const Chunk& c) override {
    EXPECT_EQ(c.index, static_cast<int64_t>(chunks.size()));
    const int64_t expected_first =
        chunks.empty() ? 0 : chunks.back().first_frame + chunks.back().frames.size(0);
    EXPECT_EQ(c.first_frame, expected_first);
    EXPECT_EQ(c.frames.scalar_type(), at::kByte);
    EXPECT_TRUE(c.frames.is_contiguous());
    EXPECT_EQ(c.frames.dim(), 4);
    EXPECT_EQ(c.frames.size(3), 3);
    EXPECT_EQ(c.final, c.first_frame + c.frames.size(0) == c.total_frames);
    chunks.push_back(c);
  }
  at::Tensor u8() const {
    std::vector<at::Tensor> v;
    for (const auto& c : chunks) v.push_back(c.frames);
    return at::cat(v, 0);
  }
  at::Tensor f32() const {
    std::vector<at::Tensor> v;
    for (const auto& c : chunks) v.push_back(c.frames_f32);
    return at::cat(v, 0);
  }
  std::vector<int64_t> sizes() const {
    std::vector<int64_t> v;
    for (const auto& c : chunks) v.push_back(c.frames.size(0));
    return v;
  }
};

bool same(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && at::equal(a, b);
}

struct Case {
  const char* name;
  int64_t t, h, w;
  bool tiling;
  int64_t tile, overlap;
  int64_t clip_length;  // 16 lets the isolated head trigger
  bool head, tail;
};

class StreamVsWhole : public ::testing::TestWithParam<Case> {};

// Decodes on `ranks` ranks with the sink on rank 0; returns rank 0's chunks.
Collector decode_on(const VideoDecoder& d, const at::Tensor& lat, int ranks, const DecodeOptions& o,
                    std::vector<h3::vae::DecodeReport>* reports = nullptr) {
  Collector col;
  std::vector<h3::vae::DecodeReport> rep(static_cast<size_t>(ranks));
  auto results = h3::dist::run_threads(ranks, [&](h3::dist::Group& g) {
    rep[static_cast<size_t>(g.rank())] = d.decode_chunks(lat, g.rank() == 0 ? &col : nullptr, g, o);
  });
  for (const auto& r : results) EXPECT_TRUE(r.ok) << "rank " << r.rank << ": " << r.error;
  if (reports) *reports = rep;
  return col;
}

TEST_P(StreamVsWhole, ChunksEqualTheWholeDecodeOnEveryRankCount) {
  const Case& k = GetParam();
  VaeConfig c = tiny_config();
  c.tile_size = k.tile;
  c.tile_overlap_min = k.overlap;
  c.clip_length = k.clip_length;
  c.isolated_first_frame = k.head;
  c.isolated_last_frame = k.tail;
  const VideoDecoder d = tiny_decoder(c);
  const at::Tensor lat = latents(k.t, k.h, k.w);
  const auto plan = d.plan(k.t);
  EXPECT_EQ(plan.head, k.head);
  EXPECT_EQ(plan.tail, k.tail);

  const at::Tensor ref_unit = h3::vae::to_unit_rgb(reference_decode(d, lat, k.tiling), 16 * k.h, 16 * k.w);
  const at::Tensor ref_u8 = h3::vae::quantize_u8(ref_unit);

  DecodeOptions o;
  o.tiling = k.tiling;
  o.float_frames = true;
  // The whole-clip entry point, single rank.
  const auto whole = d.decode(lat, o);
  EXPECT_TRUE(same(whole.frames, ref_u8));
  EXPECT_TRUE(same(whole.frames_f32, ref_unit));

  std::vector<int64_t> planned;
  for (const auto& pc : plan.chunks) planned.push_back(pc.frames);
  for (int ranks : {1, 2, 3}) {
    SCOPED_TRACE("ranks = " + std::to_string(ranks));
    std::vector<h3::vae::DecodeReport> reports;
    const Collector col = decode_on(d, lat, ranks, o, &reports);
    EXPECT_EQ(col.sizes(), planned);
    EXPECT_EQ(col.sizes(), whole.chunk_frames);
    ASSERT_FALSE(col.chunks.empty());
    EXPECT_TRUE(col.chunks.back().final);
    EXPECT_TRUE(same(col.u8(), ref_u8));
    EXPECT_TRUE(same(col.f32(), ref_unit));
    int64_t tiles = 0;
    for (const auto& r : reports) {
      EXPECT_EQ(r.clips, plan.num_clips);
      tiles += r.tiles_decoded;
    }
    // Every tile is decoded once per clip, by one rank (or by every rank when there are fewer tiles).
    const int64_t per_clip = reports[0].tiles_per_clip;
    EXPECT_EQ(tiles, plan.num_clips * per_clip * (per_clip < ranks ? ranks : 1));
    EXPECT_EQ(reports[0].chunks_delivered, static_cast<int64_t>(planned.size()));
    for (size_t r = 1; r < reports.size(); ++r) EXPECT_EQ(reports[r].chunks_delivered, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, StreamVsWhole,
    ::testing::Values(
        // one 128 x 128 tile, no padding, 2 clips
        Case{"t12_one_tile", 12, 8, 8, true, 256, 64, 17, false, false},
        // release tiles: 2 across 320 px with a 192 px overlap; 3 pad latents
        Case{"t9_two_tiles_padded", 9, 8, 20, true, 256, 64, 17, false, false},
        // small tiles for cheap grids: 4 x 3 tiles with uneven overlaps (32, 32, 16 and 32, 16)
        Case{"t7_uneven_tiles", 7, 11, 9, true, 64, 16, 17, false, false},
        Case{"t7_tiling_off", 7, 11, 9, false, 64, 16, 17, false, false},
        Case{"t15_padded_tiles", 15, 6, 5, true, 64, 16, 17, false, false},
        // isolated paths (clip 16: no pre-padding, so the head can trigger)
        Case{"head", 10, 5, 4, true, 64, 16, 16, true, false},
        Case{"tail", 10, 5, 4, true, 64, 16, 17, false, true},
        Case{"tail_unpadded", 13, 4, 5, true, 64, 16, 17, false, true},
        Case{"head_and_tail", 11, 5, 4, true, 64, 16, 16, true, true},
        Case{"head_and_tail_one_clip", 7, 4, 4, true, 64, 16, 16, true, true},
        Case{"neither_clip16", 10, 5, 4, true, 64, 16, 16, false, false}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

TEST(Decode, OneTileThreeRanksDecodesLocallyOnEveryRank) {
  const VideoDecoder d = tiny_decoder(tiny_config());
  const at::Tensor lat = latents(7, 4, 6);
  DecodeOptions o;
  o.float_frames = true;
  const auto single = d.decode(lat, o);
  std::vector<h3::vae::DecodeReport> reports;
  const Collector col = decode_on(d, lat, 3, o, &reports);
  EXPECT_TRUE(same(col.u8(), single.frames));
  EXPECT_TRUE(same(col.f32(), single.frames_f32));
  for (const auto& r : reports) {
    EXPECT_TRUE(r.rank_local_tiles);
    EXPECT_EQ(r.tiles_per_clip, 1);
    EXPECT_EQ(r.clips, 1);
    EXPECT_EQ(r.tiles_decoded, 1);  // every rank decoded the one tile itself
  }
}

TEST(Decode, CropsToTheRequestedSize) {
  const VideoDecoder d = tiny_decoder(tiny_config());
  const at::Tensor lat = latents(7, 4, 6);
  const auto full = d.decode(lat);
  DecodeOptions o;
  o.height = 50;
  o.width = 77;
  const auto crop = d.decode(lat, o);
  ASSERT_EQ(crop.frames.sizes(), at::IntArrayRef({22, 50, 77, 3}));
  EXPECT_TRUE(crop.frames.is_contiguous());
  EXPECT_TRUE(same(crop.frames, full.frames.narrow(1, 0, 50).narrow(2, 0, 77)));
  // Ranks convert bands of the cropped rows (50 = 25 + 25, 16 + 17 + 17), with the tiles
  // decoded locally (one tile) and spread over the ranks (small tiles).
  VaeConfig small_tiles = tiny_config();
  small_tiles.tile_size = 64;
  small_tiles.tile_overlap_min = 16;
  const VideoDecoder tiled = tiny_decoder(small_tiles);
  const auto tiled_crop = tiled.decode(lat, o);
  for (int ranks : {2, 3}) {
    SCOPED_TRACE("ranks = " + std::to_string(ranks));
    EXPECT_TRUE(same(decode_on(d, lat, ranks, o).u8(), crop.frames));
    EXPECT_TRUE(same(decode_on(tiled, lat, ranks, o).u8(), tiled_crop.frames));
  }
  o.width = 97;  // wider than 6 latents = 96 px
  try {
    d.decode(lat, o);
    FAIL();
  } catch (const h3::Error& e) {
    EXPECT_EQ(e.kind(), h3::ErrorKind::kInvalidArgument);
  }
}

TEST(Decode, BadLatentsFailOnEveryRank) {
  const VideoDecoder d = tiny_decoder(tiny_config());
  for (const at::Tensor& bad :
       {at::zeros({1, 23, 7, 4, 4}), at::zeros({24, 7, 4, 4}), at::zeros({1, 24, 2, 4, 4})}) {
    auto results = h3::dist::run_threads(2, [&](h3::dist::Group& g) {
      Collector col;
      d.decode_chunks(bad, g.rank() == 0 ? &col : nullptr, g);
    });
    for (const auto& r : results) {
      EXPECT_FALSE(r.ok);
      EXPECT_FALSE(r.error.empty());
    }
  }
  // Ranks given different latent shapes refuse together instead of hanging.
  auto results = h3::dist::run_threads(2, [&](h3::dist::Group& g) {
    Collector col;
    d.decode_chunks(latents(7, 4, g.rank() == 0 ? 4 : 5), g.rank() == 0 ? &col : nullptr, g);
  });
  for (const auto& r : results) EXPECT_FALSE(r.ok);
  EXPECT_NE(results[1].error.find("rank 0"), std::string::npos) << results[1].error;
}

int kind_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const h3::Error& err) {
    return static_cast<int>(err.kind());
  } catch (...) {
    return -1;
  }
}

TEST(SinkContract, SinkOnRankOneOfThreeIsRefusedEverywhere) {
  const VideoDecoder d = tiny_decoder(tiny_config());
  const at::Tensor lat = latents(7, 4, 4);
  std::atomic<int> delivered{0};
  struct Counting : ChunkSink {
    std::atomic<int>* n;
    void on_chunk(const Chunk&) override { ++*n; }
  };
  auto results = h3::dist::run_threads(3, [&](h3::dist::Group& g) {
    Counting s;
    s.n = &delivered;
    d.decode_chunks(lat, g.rank() == 1 ? &s : nullptr, g);
  });
  ASSERT_EQ(results.size(), 3u);
  for (const auto& r : results) {
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(kind_of(r.exception), static_cast<int>(h3::ErrorKind::kInvalidArgument));
    EXPECT_NE(r.error.find("rank 1"), std::string::npos) << r.error;
    EXPECT_EQ(r.error, results[0].error);  // the same decision everywhere
  }
  EXPECT_EQ(delivered.load(), 0);
  // No sink at all, or two, is refused the same way.
  for (int mask : {0, 3}) {
    auto res = h3::dist::run_threads(2, [&](h3::dist::Group& g) {
      Counting s;
      s.n = &delivered;
      d.decode_chunks(lat, (mask >> g.rank()) & 1 ? &s : nullptr, g);
    });
    for (const auto& r : res) EXPECT_FALSE(r.ok);
  }
  EXPECT_EQ(delivered.load(), 0);
}

struct Throwing : ChunkSink {
  int64_t fail_at;
  int64_t delivered = 0;
  void on_chunk(const Chunk& c) override {
    if (c.index == fail_at) throw std::runtime_error("disk full");
    ++delivered;
  }
};

TEST(SinkContract, ThrowingSinkStopsEveryRankAfterExactlyKChunks) {
  VaeConfig c = tiny_config();
  c.tile_size = 64;
  c.tile_overlap_min = 16;
  const VideoDecoder d = tiny_decoder(c);
  const at::Tensor lat = latents(17, 5, 5);  // 3 clips, 4 chunks (17, 17, 17, 5), 2 x 2 tiles
  ASSERT_EQ(d.plan(17).chunks.size(), 4u);
  for (int ranks : {1, 3}) {
    for (int64_t k : {0, 1, 3}) {
      SCOPED_TRACE("ranks " + std::to_string(ranks) + ", failing chunk " + std::to_string(k));
      Throwing sink;
      sink.fail_at = k;
      auto results = h3::dist::run_threads(
          ranks, [&](h3::dist::Group& g) { d.decode_chunks(lat, g.rank() == 0 ? &sink : nullptr, g); });
      EXPECT_EQ(sink.delivered, k);
      ASSERT_EQ(static_cast<int>(results.size()), ranks);
      EXPECT_FALSE(results[0].ok);
      EXPECT_EQ(kind_of(results[0].exception), static_cast<int>(h3::ErrorKind::kCallback));
      EXPECT_NE(results[0].error.find("disk full"), std::string::npos) << results[0].error;
      EXPECT_NE(results[0].error.find("chunk " + std::to_string(k)), std::string::npos) << results[0].error;
      for (int r = 1; r < ranks; ++r) {
        EXPECT_FALSE(results[static_cast<size_t>(r)].ok);
        EXPECT_EQ(kind_of(results[static_cast<size_t>(r)].exception),
                  static_cast<int>(h3::ErrorKind::kDistributed));
        EXPECT_NE(results[static_cast<size_t>(r)].error.find("rank 0 failed"), std::string::npos);
        EXPECT_NE(results[static_cast<size_t>(r)].error.find("disk full"), std::string::npos);
      }
    }
  }
}

TEST(SinkContract, CancelThroughTheSinkStaysACancel) {
  const VideoDecoder d = tiny_decoder(tiny_config());
  struct Cancelling : ChunkSink {
    void on_chunk(const Chunk&) override { throw h3::Error(h3::ErrorKind::kCancelled, "flushing"); }
  } sink;
  try {
    d.decode_chunks(latents(7, 4, 4), sink);
    FAIL();
  } catch (const h3::Error& e) {
    EXPECT_EQ(e.kind(), h3::ErrorKind::kCancelled);
  }
}

// The ranks of one world decode their tiles at different intra-op thread counts: a tile is the
// same bits at 1, 2, 3 and 4 threads (the attention over 1284 rows in blocks of 768 query rows
// per head; the linears in tiles). meson test core_threads_avx2 runs this with oneDNN and MKL held
// to AVX2, where a GEMM split between threads sums differently.
TEST(VaeDecodeThreads, ATileIsTheSameBitsAtAnyThreadCount) {
  const int saved = at::get_num_threads();
  VaeConfig c = h3::vae::small_config(2, 4, 64);
  c.num_register_tokens = 4;
  const VideoDecoder d = tiny_decoder(c);
  const at::Tensor tile = latents(5, 16, 16).squeeze(0);  // 1280 tokens + 5 suffix rows
  at::set_num_threads(1);
  const at::Tensor one = h3::vae::decode_tile(d.config(), d.weights(), tile);
  for (int threads : {2, 3, 4}) {
    at::set_num_threads(threads);
    const at::Tensor got = h3::vae::decode_tile(d.config(), d.weights(), tile);
    EXPECT_TRUE(at::equal(got, one)) << threads << " threads: max |diff| "
                                     << (got - one).abs().max().item<float>();
  }
  at::set_num_threads(saved);
}

}  // namespace
