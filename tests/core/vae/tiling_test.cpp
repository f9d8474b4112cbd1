// The spatial split rule, blending and stitching (docs/h3-model.md §7.4).
#include "vae/tiling.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "h3/error.h"

namespace {

using h3::vae::AxisSplit;
using h3::vae::split_axis;

TEST(Tiling, SplitTable) {
  struct Row {
    int64_t extent;
    std::vector<int64_t> starts, overlaps;
  };
  // docs/h3-model.md §7.4 table, plus the golden vectors' 320 px width.
  const std::vector<Row> rows = {
      {480, {0, 112, 224}, {144, 144}},
      {768, {0, 160, 336, 512}, {96, 80, 80}},
      {832, {0, 192, 384, 576}, {64, 64, 64}},
      {864, {0, 144, 288, 448, 608}, {112, 112, 96, 96}},
      {1344, {0, 176, 352, 528, 704, 896, 1088}, {80, 80, 80, 80, 64, 64}},
      {320, {0, 64}, {192}},
      {272, {0, 16}, {240}},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.extent);
    const AxisSplit s = split_axis(r.extent, 256, 64, 16);
    EXPECT_EQ(s.starts, r.starts);
    EXPECT_EQ(s.overlaps, r.overlaps);
    EXPECT_EQ(s.lengths, std::vector<int64_t>(r.starts.size(), 256));
    EXPECT_EQ(s.starts.back() + 256, r.extent);
  }
}

TEST(Tiling, OneTileUpToTheTileSize) {
  for (int64_t e : {16, 128, 192, 256}) {
    const AxisSplit s = split_axis(e, 256, 64, 16);
    EXPECT_EQ(s.starts, std::vector<int64_t>{0});
    EXPECT_EQ(s.lengths, std::vector<int64_t>{e});
    EXPECT_TRUE(s.overlaps.empty());
  }
  const auto g = h3::vae::plan_tiles(30, 52, 16, true, 256, 64);
  EXPECT_EQ(g.rows(), 3);
  EXPECT_EQ(g.cols(), 4);
  EXPECT_EQ(g.count(), 12);  // 480 x 832
  EXPECT_EQ(h3::vae::plan_tiles(30, 52, 16, false, 256, 64).count(), 1);
}

TEST(Tiling, BlendIsALinearRamp) {
  const at::Tensor a = at::full({2, 7}, 10.0f);
  const at::Tensor b = at::zeros({2, 6});
  const at::Tensor r = h3::vae::blend(a, b, 4, 1);
  ASSERT_EQ(r.sizes(), b.sizes());
  // weights of a: 1, 0.75, 0.5, 0.25; then b as is.
  const std::vector<float> want = {10.f, 7.5f, 5.f, 2.5f, 0.f, 0.f};
  for (int64_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(r[1][i].item<float>(), want[static_cast<size_t>(i)]);
  // The extent is capped by either side.
  EXPECT_EQ(h3::vae::blend(at::ones({3}), at::zeros({2}), 5, 0).size(0), 2);
  EXPECT_FLOAT_EQ(h3::vae::blend(at::ones({3}), at::zeros({2}), 5, 0)[1].item<float>(), 0.5f);
}

TEST(Tiling, StitchBlendsRawNeighbours) {
  // 2 x 2 tiles of 256 px over 320 x 320: overlaps of 192 px.
  const auto g = h3::vae::plan_tiles(20, 20, 16, true, 256, 64);
  ASSERT_EQ(g.count(), 4);
  std::vector<at::Tensor> tiles;
  for (int k = 0; k < 4; ++k) tiles.push_back(at::full({1, 256, 256}, static_cast<float>(k)));
  const at::Tensor out = h3::vae::stitch_tiles(tiles, g);
  ASSERT_EQ(out.sizes(), at::IntArrayRef({1, 320, 320}));
  // Corners come from their own tile only where no blend reaches.
  EXPECT_FLOAT_EQ(out[0][0][0].item<float>(), 0.f);
  EXPECT_FLOAT_EQ(out[0][319][319].item<float>(), 3.f);
  // Tile 3 (bottom right) at its local (y, x) = (96, 96), i.e. output (160, 160): the
  // vertical blend with raw tile 1 gives 1 + (3 - 1) * 96/192 = 2, then the horizontal
  // blend with raw tile 2 gives 2 + (2 - 2) * ... = 2 weighted: 2*(1-0.5) + 2*0.5 = 2.
  EXPECT_FLOAT_EQ(out[0][160][160].item<float>(), 2.f);
  // Tile 1 (top right) at local (0, 96), output (0, 160): 0 * 0.5 + 1 * 0.5.
  EXPECT_FLOAT_EQ(out[0][0][160].item<float>(), 0.5f);
  // Tile 3 at local (0, 0) = output (64, 64): vertical gives raw tile 1 (weight 0 on
  // tile 3); the horizontal blend then takes raw tile 2, also with weight 1.
  EXPECT_FLOAT_EQ(out[0][64][64].item<float>(), 2.f);
}

TEST(Tiling, BlendSliceIsTheWholeBlendsSliceBitForBit) {
  const at::Tensor a = at::randn({2, 9, 3});
  const at::Tensor b = at::randn({2, 7, 3});
  const at::Tensor whole = h3::vae::blend(a, b, 5, 1);
  for (int64_t lo = 0; lo <= 7; ++lo) {
    for (int64_t hi = lo; hi <= 7; ++hi) {
      SCOPED_TRACE(std::to_string(lo) + ".." + std::to_string(hi));
      const at::Tensor part = h3::vae::blend_slice(a, b, 5, 1, lo, hi);
      ASSERT_EQ(part.sizes(), at::IntArrayRef({2, hi - lo, 3}));
      EXPECT_TRUE(at::equal(part, whole.narrow(1, lo, hi - lo)));
    }
  }
  EXPECT_THROW(h3::vae::blend_slice(a, b, 5, 1, 3, 8), h3::Error);
  EXPECT_THROW(h3::vae::blend_slice(a, b, 5, 1, 4, 3), h3::Error);
}

TEST(Tiling, EveryBandOfRowsIsTheStitchedClipsRowsBitForBit) {
  // 4 x 3 tiles of 64 px with uneven overlaps, and a single tile.
  for (const bool tiling : {true, false}) {
    SCOPED_TRACE(tiling ? "tiled" : "one tile");
    const auto g = h3::vae::plan_tiles(11, 9, 16, tiling, 64, 16);
    std::vector<at::Tensor> tiles;
    for (int64_t k = 0; k < g.count(); ++k) {
      const int64_t th = g.y.lengths[static_cast<size_t>(k / g.cols())];
      const int64_t tw = g.x.lengths[static_cast<size_t>(k % g.cols())];
      tiles.push_back(at::randn({3, 2, th, tw}));
    }
    const at::Tensor whole = h3::vae::stitch_tiles(tiles, g);
    ASSERT_EQ(whole.sizes(), at::IntArrayRef({3, 2, 176, 144}));
    // Bands that start and end inside overlaps, at tile-row starts, and empty ones.
    for (const int64_t y0 : {0, 1, 31, 47, 48, 49, 100, 175, 176}) {
      for (const int64_t y1 : {y0, y0 + 1, y0 + 17, int64_t{176}}) {
        if (y1 > 176) continue;
        SCOPED_TRACE(std::to_string(y0) + ".." + std::to_string(y1));
        const at::Tensor band = h3::vae::stitch_rows(tiles, g, y0, y1);
        ASSERT_EQ(band.sizes(), at::IntArrayRef({3, 2, y1 - y0, 144}));
        EXPECT_TRUE(at::equal(band, whole.narrow(2, y0, y1 - y0)));
      }
    }
    EXPECT_THROW(h3::vae::stitch_rows(tiles, g, 0, 177), h3::Error);
  }
}

}  // namespace
