#include "vae/tiling.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "h3/error.h"

namespace h3::vae {

AxisSplit split_axis(int64_t extent, int64_t tile, int64_t overlap_min, int64_t unit) {
  if (extent <= 0 || tile <= 0 || unit <= 0 || overlap_min < 0 || overlap_min >= tile) {
    throw Error(ErrorKind::kInvalidArgument, "tile split: extent " + std::to_string(extent) + ", tile " +
                                                 std::to_string(tile) + " and minimum overlap " +
                                                 std::to_string(overlap_min) + " px do not make a tiling");
  }
  AxisSplit s;
  if (tile >= extent) {
    s.starts = {0};
    s.lengths = {extent};
    return s;
  }
  int64_t n = (extent + tile - 1) / tile;
  int64_t slack = 0;
  while (true) {
    slack = tile * n - overlap_min * (n - 1) - extent;
    if (slack >= 0) break;
    ++n;
  }
  s.overlaps.assign(static_cast<size_t>(n - 1), overlap_min);
  for (int64_t i = 0; i < slack / unit; ++i) s.overlaps[static_cast<size_t>(i % (n - 1))] += unit;
  s.starts.push_back(0);
  for (int64_t i = 0; i + 1 < n; ++i)
    s.starts.push_back(s.starts.back() + tile - s.overlaps[static_cast<size_t>(i)]);
  s.lengths.assign(static_cast<size_t>(n), tile);
  return s;
}

TileGrid plan_tiles(int64_t latent_h, int64_t latent_w, int64_t unit, bool tiling, int64_t tile,
                    int64_t overlap_min) {
  TileGrid g;
  g.unit = unit;
  const int64_t h = latent_h * unit, w = latent_w * unit;
  if (!tiling) {
    g.y.starts = {0};
    g.y.lengths = {h};
    g.x.starts = {0};
    g.x.lengths = {w};
    return g;
  }
  g.y = split_axis(h, tile, overlap_min, unit);
  g.x = split_axis(w, tile, overlap_min, unit);
  return g;
}

at::Tensor tile_latent(const at::Tensor& clip, const TileGrid& g, int64_t k) {
  const auto i = static_cast<size_t>(k / g.cols()), j = static_cast<size_t>(k % g.cols());
  const int64_t y0 = g.y.starts[i] / g.unit, yl = g.y.lengths[i] / g.unit;
  const int64_t x0 = g.x.starts[j] / g.unit, xl = g.x.lengths[j] / g.unit;
  return clip.slice(-2, y0, y0 + yl).slice(-1, x0, x0 + xl);
}

at::Tensor blend(const at::Tensor& a, const at::Tensor& b, int64_t extent, int64_t dim) {
  const int64_t d = dim < 0 ? dim + b.dim() : dim;
  return blend_slice(a, b, extent, d, 0, b.size(d));
}

at::Tensor blend_slice(const at::Tensor& a, const at::Tensor& b, int64_t extent, int64_t dim, int64_t lo,
                       int64_t hi) {
  const int64_t d = dim < 0 ? dim + b.dim() : dim;
  if (lo < 0 || hi < lo || hi > b.size(d)) {
    throw Error(ErrorKind::kInternal, "blend: positions " + std::to_string(lo) + ".." + std::to_string(hi) +
                                          " outside 0.." + std::to_string(b.size(d)));
  }
  const int64_t e = std::min({extent, a.size(d), b.size(d)});
  const int64_t mixed_end = std::min(hi, std::max<int64_t>(e, 0));
  if (lo >= mixed_end) return b.narrow(d, lo, hi - lo);
  // Same weights as the reference: positions / e in the tensor's dtype, for all e positions
  // and then cut, so that a slice's weights are the whole blend's.
  const at::Tensor pos = at::arange(e, b.options());
  std::vector<int64_t> shape(static_cast<size_t>(b.dim()), 1);
  shape[static_cast<size_t>(d)] = mixed_end - lo;
  const at::Tensor wb = (pos / static_cast<double>(e)).narrow(0, lo, mixed_end - lo).view(shape);
  const at::Tensor wa = (1 - pos / static_cast<double>(e)).narrow(0, lo, mixed_end - lo).view(shape);
  const at::Tensor mixed =
      a.narrow(d, a.size(d) - e + lo, mixed_end - lo) * wa + b.narrow(d, lo, mixed_end - lo) * wb;
  if (mixed_end == hi) return mixed;
  return at::cat({mixed, b.narrow(d, mixed_end, hi - mixed_end)}, d);
}

at::Tensor stitch_tiles(const std::vector<at::Tensor>& tiles, const TileGrid& g) {
  const int64_t height = g.y.starts.empty() ? 0 : g.y.starts.back() + g.y.lengths.back();
  return stitch_rows(tiles, g, 0, height);
}

at::Tensor stitch_rows(const std::vector<at::Tensor>& tiles, const TileGrid& g, int64_t y0, int64_t y1) {
  if (static_cast<int64_t>(tiles.size()) != g.count()) {
    throw Error(ErrorKind::kInternal, "stitch: " + std::to_string(tiles.size()) + " tiles for a grid of " +
                                          std::to_string(g.count()));
  }
  const int64_t height = g.y.starts.back() + g.y.lengths.back();
  if (y0 < 0 || y1 < y0 || y1 > height) {
    throw Error(ErrorKind::kInternal, "stitch: rows " + std::to_string(y0) + ".." + std::to_string(y1) +
                                          " outside the grid's 0.." + std::to_string(height));
  }
  if (tiles.size() == 1) return tiles[0].narrow(-2, y0, y1 - y0);
  const int64_t rows = g.rows(), cols = g.cols();
  std::vector<at::Tensor> row_parts;
  for (int64_t i = 0; i < rows; ++i) {
    // Tile row i gives the output rows from its start to the next row's start (its lower
    // overlap belongs to the row below, which blends it in).
    const int64_t start = g.y.starts[static_cast<size_t>(i)];
    const int64_t end = i + 1 < rows ? g.y.starts[static_cast<size_t>(i + 1)] : start + g.y.lengths.back();
    const int64_t lo = std::max(y0, start) - start, hi = std::min(y1, end) - start;
    if (hi <= lo) continue;
    std::vector<at::Tensor> parts;
    for (int64_t j = 0; j < cols; ++j) {
      const at::Tensor& raw = tiles[static_cast<size_t>(i * cols + j)];
      // Neighbours are the raw decoded tiles, not their blended versions.
      at::Tensor t = i > 0 ? blend_slice(tiles[static_cast<size_t>((i - 1) * cols + j)], raw,
                                         g.y.overlaps[static_cast<size_t>(i - 1)], -2, lo, hi)
                           : raw.narrow(-2, lo, hi - lo);
      if (j > 0) {
        const at::Tensor& left = tiles[static_cast<size_t>(i * cols + j - 1)];
        t = blend(left.narrow(-2, lo, hi - lo), t, g.x.overlaps[static_cast<size_t>(j - 1)], -1);
      }
      if (j + 1 < cols) t = t.narrow(-1, 0, t.size(-1) - g.x.overlaps[static_cast<size_t>(j)]);
      parts.push_back(t);
    }
    row_parts.push_back(parts.size() == 1 ? parts[0] : at::cat(parts, -1));
  }
  if (row_parts.empty()) {
    std::vector<int64_t> shape = tiles[0].sizes().vec();
    shape[shape.size() - 2] = 0;
    shape.back() = g.x.starts.back() + g.x.lengths.back();
    return at::empty(shape, tiles[0].options());
  }
  return row_parts.size() == 1 ? row_parts[0] : at::cat(row_parts, -2);
}

}  // namespace h3::vae
