#include "vae/tiling.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "common/error.h"

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
  const int64_t e = std::min({extent, a.size(d), b.size(d)});
  if (e <= 0) return b;
  // Same weights as the reference: positions / e in the tensor's dtype.
  const at::Tensor pos = at::arange(e, b.options());
  std::vector<int64_t> shape(static_cast<size_t>(b.dim()), 1);
  shape[static_cast<size_t>(d)] = e;
  const at::Tensor wb = (pos / static_cast<double>(e)).view(shape);
  const at::Tensor wa = (1 - pos / static_cast<double>(e)).view(shape);
  const at::Tensor mixed = a.narrow(d, a.size(d) - e, e) * wa + b.narrow(d, 0, e) * wb;
  if (e == b.size(d)) return mixed;
  return at::cat({mixed, b.narrow(d, e, b.size(d) - e)}, d);
}

at::Tensor stitch_tiles(const std::vector<at::Tensor>& tiles, const TileGrid& g) {
  if (static_cast<int64_t>(tiles.size()) != g.count()) {
    throw Error(ErrorKind::kInternal, "stitch: " + std::to_string(tiles.size()) + " tiles for a grid of " +
                                          std::to_string(g.count()));
  }
  if (tiles.size() == 1) return tiles[0];
  const int64_t rows = g.rows(), cols = g.cols();
  std::vector<at::Tensor> row_parts;
  for (int64_t i = 0; i < rows; ++i) {
    std::vector<at::Tensor> parts;
    for (int64_t j = 0; j < cols; ++j) {
      at::Tensor t = tiles[static_cast<size_t>(i * cols + j)];
      // Neighbours are the raw decoded tiles, not their blended versions.
      if (i > 0)
        t = blend(tiles[static_cast<size_t>((i - 1) * cols + j)], t, g.y.overlaps[static_cast<size_t>(i - 1)],
                  -2);
      if (j > 0)
        t = blend(tiles[static_cast<size_t>(i * cols + j - 1)], t, g.x.overlaps[static_cast<size_t>(j - 1)],
                  -1);
      if (i + 1 < rows) t = t.narrow(-2, 0, t.size(-2) - g.y.overlaps[static_cast<size_t>(i)]);
      if (j + 1 < cols) t = t.narrow(-1, 0, t.size(-1) - g.x.overlaps[static_cast<size_t>(j)]);
      parts.push_back(t);
    }
    row_parts.push_back(at::cat(parts, -1));
  }
  return at::cat(row_parts, -2);
}

}  // namespace h3::vae
