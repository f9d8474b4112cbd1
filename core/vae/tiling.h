// Spatial tiling of one temporal clip (docs/h3-model.md §7.4) and the linear
// cross-fade shared with the temporal overlap (§7.3).
//
// The split rule is part of the released numerics: every tile is `tile` px
// (unless one tile covers the extent), the overlaps start at the minimum and
// the slack is spread over them in steps of one latent (16 px), round-robin
// from the first. Tiles are decoded independently with tile-local RoPE and
// stitched in row-major order, each blended with its *raw* (unblended) upper
// and left neighbours.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace h3::vae {

// Tiles along one axis, in pixels.
struct AxisSplit {
  std::vector<int64_t> starts;
  std::vector<int64_t> lengths;
  std::vector<int64_t> overlaps;  // between tile i and i+1
};

// `unit` is the pixels per latent (16): starts, lengths and overlaps are multiples of it
// when `extent`, `tile` and `overlap_min` are.
AxisSplit split_axis(int64_t extent, int64_t tile, int64_t overlap_min, int64_t unit);

struct TileGrid {
  AxisSplit y, x;  // pixels
  int64_t unit = 16;
  int64_t rows() const { return static_cast<int64_t>(y.starts.size()); }
  int64_t cols() const { return static_cast<int64_t>(x.starts.size()); }
  int64_t count() const { return rows() * cols(); }
};

// The grid for a latent of h x w (pixels = 16h x 16w). With tiling off, one tile covers all.
TileGrid plan_tiles(int64_t latent_h, int64_t latent_w, int64_t unit, bool tiling, int64_t tile,
                    int64_t overlap_min);

// Latent slice of tile k (row-major) of a clip [B, C, t, h, w].
at::Tensor tile_latent(const at::Tensor& clip, const TileGrid& g, int64_t k);

// Linear cross-fade of the end of `a` into the start of `b` along `dim` over
// min(extent, a.size(dim), b.size(dim)) positions p: a * (1 - p/e) + b * (p/e).
// Returns `b` with its first e positions replaced (a new tensor where e > 0).
at::Tensor blend(const at::Tensor& a, const at::Tensor& b, int64_t extent, int64_t dim);

// Positions [lo, hi) along `dim` of blend(a, b, extent, dim), computed without the rest: the
// same operations on the same elements, hence the same bits. May return a view of `b`.
at::Tensor blend_slice(const at::Tensor& a, const at::Tensor& b, int64_t extent, int64_t dim, int64_t lo,
                       int64_t hi);

// Stitches decoded tiles (row-major, each [..., H_tile, W_tile]) into one
// [..., H, W] tensor.
at::Tensor stitch_tiles(const std::vector<at::Tensor>& tiles, const TileGrid& g);

// Rows [y0, y1) of stitch_tiles(tiles, g), bit for bit, computing only those rows: ranks that
// each stitch a band of rows share the work that a single owner would otherwise do alone.
at::Tensor stitch_rows(const std::vector<at::Tensor>& tiles, const TileGrid& g, int64_t y0, int64_t y1);

}  // namespace h3::vae
