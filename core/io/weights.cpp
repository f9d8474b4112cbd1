#include "io/weights.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>

#include "common/shape.h"
#include "h3/error.h"
#include "io/layout.h"

namespace h3::io {
namespace {

// Rows [row0, row0 + rows) of a stored tensor seen as 2-D [dim0, rest].
struct Segment {
  std::shared_ptr<const SafetensorsFile> file;
  const TensorInfo* info = nullptr;
  int64_t row0 = 0, rows = 0;
};

struct Entry {
  std::vector<int64_t> shape;  // canonical
  at::ScalarType dtype = at::kFloat;
  std::vector<Segment> segments;  // concatenated along dim 0
  std::string source;             // stored name, for messages
};

int64_t rows_of(const std::vector<int64_t>& shape) {
  return shape.empty() ? 1 : shape[0];
}
int64_t cols_of(const std::vector<int64_t>& shape) {
  int64_t c = 1;
  for (size_t i = 1; i < shape.size(); ++i) c *= shape[i];
  return c;
}

// Bytes of source read per block: bounds both the resident mapped pages and the
// temporary a device or dtype conversion may need.
constexpr int64_t kBlockBytes = 8 << 20;

}  // namespace

struct Weights::State {
  Checkpoint ckpt;
  LayoutParams params{};
  bool native = false;
  std::map<std::string, Entry> entries;
};

namespace {

void check_qkv_rows(const std::string& path, const std::string& canonical, const std::string& stored,
                    int64_t rows, int64_t expect, const LayoutParams& p, bool fused) {
  if (rows == expect) return;
  throw Error(ErrorKind::kMismatch, path + ": tensor '" + stored + "' has " + std::to_string(rows) +
                                        " rows but the model config (" + std::to_string(p.num_heads) +
                                        " heads x head_dim " + std::to_string(p.head_dim) + ") needs " +
                                        (fused ? "3 x " : "") + std::to_string(p.num_heads * p.head_dim) +
                                        " for '" + canonical + "'; the checkpoint and the config disagree");
}

bool is_qkv_name(const std::string& n) {
  for (const char* p : {".attn.to_q.", ".attn.to_k.", ".attn.to_v."}) {
    if (n.find(p) != std::string::npos) return true;
  }
  return false;
}

const Entry& entry_of(const Weights::State& s, const std::string& name) {
  auto it = s.entries.find(name);
  if (it == s.entries.end()) {
    throw Error(ErrorKind::kNotFound,
                s.ckpt.path() + ": no tensor '" + name + "' (canonical diffusers name" +
                    std::string(s.native ? ", after converting the native layout" : "") + ")");
  }
  return it->second;
}

// Canonical row ranges [begin, end) of the shard, and its column range.
struct Plan {
  std::vector<std::pair<int64_t, int64_t>> rows;
  int64_t col0 = 0, cols = 0;
  std::vector<int64_t> shape;
};

Plan plan_for(const Weights::State& s, const std::string& name, const Entry& e, const Shard& sh) {
  auto bad = [&](const std::string& why) -> Error {
    return Error(ErrorKind::kInvalidArgument, s.ckpt.path() + ": cannot take shard rank " +
                                                  std::to_string(sh.rank) + " of " + std::to_string(sh.size) +
                                                  " of tensor '" + name + "' " + shape_string(e.shape) +
                                                  ": " + why);
  };
  if (sh.size < 1 || sh.rank < 0 || sh.rank >= sh.size) throw bad("the rank must lie in [0, size)");
  Plan p;
  p.shape = e.shape;
  const int64_t R = rows_of(e.shape), C = cols_of(e.shape), n = sh.size, r = sh.rank;
  p.cols = C;
  switch (sh.split) {
    case Split::kReplicated: p.rows.push_back({0, R}); break;
    case Split::kColumn:
      if (e.shape.empty()) throw bad("a 0-d tensor has no dim 0 to split");
      if (R % n != 0) throw bad("the size does not divide dim 0 (" + std::to_string(R) + ")");
      p.rows.push_back({r * R / n, (r + 1) * R / n});
      p.shape[0] = R / n;
      break;
    case Split::kFusedColumn: {
      if (e.shape.empty()) throw bad("a 0-d tensor has no dim 0 to split");
      if (R % (2 * n) != 0) throw bad("2 x size does not divide dim 0 (" + std::to_string(R) + ")");
      const int64_t h = R / 2;
      p.rows.push_back({r * h / n, (r + 1) * h / n});
      p.rows.push_back({h + r * h / n, h + (r + 1) * h / n});
      p.shape[0] = R / n;
      break;
    }
    case Split::kRow:
      if (e.shape.size() != 2) throw bad("a row split (dim 1) needs a 2-D tensor");
      if (e.shape[1] % n != 0)
        throw bad("the size does not divide dim 1 (" + std::to_string(e.shape[1]) + ")");
      p.rows.push_back({0, R});
      p.col0 = r * e.shape[1] / n;
      p.cols = e.shape[1] / n;
      p.shape[1] = e.shape[1] / n;
      break;
  }
  return p;
}

}  // namespace

Weights Weights::open(const std::string& path, const LayoutParams& params) {
  if (params.num_heads <= 0 || params.head_dim <= 0) {
    throw Error(ErrorKind::kInvalidArgument,
                path + ": LayoutParams need positive num_heads and head_dim (got " +
                    std::to_string(params.num_heads) + ", " + std::to_string(params.head_dim) + ")");
  }
  auto s = std::make_shared<State>();
  s->ckpt = Checkpoint::open(path);
  s->params = params;
  const std::vector<std::string> stored = s->ckpt.names();
  s->native = is_native_layout(params.kind, stored);
  const int64_t H = params.num_heads, D = params.head_dim;

  auto add = [&](const std::string& canonical, Entry e) {
    auto it = s->entries.find(canonical);
    if (it != s->entries.end()) {
      throw Error(ErrorKind::kFormat, s->ckpt.path() + ": tensors '" + it->second.source + "' and '" +
                                          e.source + "' both give '" + canonical +
                                          "'; the checkpoint mixes layouts or repeats a tensor");
    }
    s->entries.emplace(canonical, std::move(e));
  };

  for (const auto& name : stored) {
    auto file = s->ckpt.shared_file_of(name);
    const TensorInfo* info = file->find(name);
    const int64_t R = rows_of(info->shape);
    if (!s->native) {
      if (is_qkv_name(name) && !info->shape.empty())
        check_qkv_rows(s->ckpt.path(), name, name, R, H * D, params, false);
      add(name, Entry{info->shape, info->dtype, {{file, info, 0, R}}, name});
      continue;
    }
    for (const auto& piece : native_to_canonical(params.kind, name)) {
      Entry e;
      e.dtype = info->dtype;
      e.shape = info->shape;
      e.source = name;
      switch (piece.how) {
        case Rearrange::kIdentity: e.segments.push_back({file, info, 0, R}); break;
        case Rearrange::kQkvPart:
          if (info->shape.empty())
            check_qkv_rows(s->ckpt.path(), piece.name, name, 0, 3 * H * D, params, true);
          check_qkv_rows(s->ckpt.path(), piece.name, name, R, 3 * H * D, params, true);
          for (int64_t h = 0; h < H; ++h) e.segments.push_back({file, info, h * 3 * D + piece.part * D, D});
          e.shape[0] = H * D;
          break;
        case Rearrange::kSwapHalves:
          if (info->shape.empty() || R % 2 != 0) {
            throw Error(ErrorKind::kMismatch, s->ckpt.path() + ": tensor '" + name + "' " +
                                                  shape_string(info->shape) +
                                                  " must have an even dim 0 (two stacked halves)");
          }
          e.segments.push_back({file, info, R / 2, R / 2});
          e.segments.push_back({file, info, 0, R / 2});
          break;
      }
      add(piece.name, std::move(e));
    }
  }
  Weights w;
  w.s_ = std::move(s);
  return w;
}

const std::string& Weights::path() const {
  return s_->ckpt.path();
}
bool Weights::is_native() const {
  return s_->native;
}
const Checkpoint& Weights::checkpoint() const {
  return s_->ckpt;
}

std::vector<std::string> Weights::names() const {
  std::vector<std::string> out;
  out.reserve(s_->entries.size());
  for (const auto& [n, e] : s_->entries) out.push_back(n);
  return out;
}

bool Weights::contains(const std::string& name) const {
  return s_->entries.count(name) != 0;
}
std::vector<int64_t> Weights::shape(const std::string& name) const {
  return entry_of(*s_, name).shape;
}
at::ScalarType Weights::dtype(const std::string& name) const {
  return entry_of(*s_, name).dtype;
}

std::vector<int64_t> Weights::shard_shape(const std::string& name, const Shard& shard) const {
  return plan_for(*s_, name, entry_of(*s_, name), shard).shape;
}

at::Tensor Weights::load(const std::string& name, const Shard& shard, const LoadOptions& opts) const {
  const Entry& e = entry_of(*s_, name);
  const Plan p = plan_for(*s_, name, e, shard);
  at::Tensor out =
      at::empty(p.shape, at::TensorOptions().dtype(opts.dtype.value_or(e.dtype)).device(opts.device));
  if (out.numel() == 0) return out;
  int64_t out_rows = 0;
  for (const auto& [b, en] : p.rows) out_rows += en - b;
  at::Tensor out2d = out.view({out_rows, p.cols});

  const int64_t src_cols = cols_of(e.shape);
  const int64_t row_bytes = src_cols * static_cast<int64_t>(c10::elementSize(e.dtype));
  const int64_t block_rows = std::max<int64_t>(1, kBlockBytes / std::max<int64_t>(1, row_bytes));
  int64_t dst = 0;
  for (const auto& [want_begin, want_end] : p.rows) {
    // Walk the segments that make up the canonical rows [want_begin, want_end).
    int64_t seg_start = 0;
    for (const Segment& seg : e.segments) {
      const int64_t lo = std::max(want_begin, seg_start), hi = std::min(want_end, seg_start + seg.rows);
      if (lo < hi) {
        at::Tensor src = seg.file->view(*seg.info).reshape({rows_of(seg.info->shape), src_cols});
        for (int64_t r = lo; r < hi; r += block_rows) {
          const int64_t n = std::min(block_rows, hi - r);
          const int64_t src_row = seg.row0 + (r - seg_start);
          seg.file->prefetch_pages(*seg.info, static_cast<uint64_t>(src_row * row_bytes),
                                   static_cast<uint64_t>(n * row_bytes));
          out2d.narrow(0, dst, n).copy_(src.narrow(0, src_row, n).narrow(1, p.col0, p.cols));
          seg.file->release_pages(*seg.info, static_cast<uint64_t>(src_row * row_bytes),
                                  static_cast<uint64_t>(n * row_bytes));
          dst += n;
        }
      }
      seg_start += seg.rows;
    }
  }
  return out;
}

}  // namespace h3::io
