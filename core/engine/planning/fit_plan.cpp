#include "engine/planning/fit_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "dit/adaln_tables.h"
#include "dit/chunk_layout.h"
#include "dit/consistency_sampler.h"
#include "dit/frames.h"
#include "dit/layers.h"
#include "dit/parameters.h"
#include "dit/sampler.h"
#include "dit/transformer.h"
#include "engine/planning/memory_guard.h"
#include "h3/error.h"
#include "h3/limits.h"

namespace h3 {
namespace {

constexpr int64_t kF32 = 4;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// One DiT forward the request runs: its rows, and the keys its attention reads (its own rows, or
// with the causal sampler the KV cache's retained rows too).
struct Forward {
  int64_t rows = 0;
  int64_t cached = 0;  // rows of the KV cache attended beside the forward's own
};

// The widest forwards of the request. Euler: the whole packed sequence (the text reserve, two
// rows per audio latent, a patch row per video latent's 2x2 patch). Causal: the largest chunk
// against the largest cache, and the text prefill (wider than a chunk on a small canvas).
std::vector<Forward> widest_forwards(const dit::DitConfig& c, const ClipPlan& p) {
  const int64_t grid_h = p.canvas_height / dit::kVaeSpatialRatio / c.patch[1];
  const int64_t grid_w = p.canvas_width / dit::kVaeSpatialRatio / c.patch[2];
  if (p.sampler != Sampler::kCausal) {
    dit::ChunkSpan whole;  // the whole clip as one span: ChunkSpan::rows is the packing's count
    whole.video_end = p.latent_frames;
    whole.audio_end = p.audio_latents;
    // The condition blocks and the pictures' vision blocks are rows of every forward too.
    return {Forward{kTextRowsReserve + p.vision_rows + p.condition_rows + whole.rows(grid_h, grid_w), 0}};
  }
  const int64_t chunk_rows = widest_causal_chunk_rows(c, p);
  // The text and the retained chunks (cache_records counts the text's record).
  const int64_t cached = kTextRowsReserve + std::max<int64_t>(0, p.cache_records - 1) * chunk_rows;
  return {Forward{chunk_rows, cached}, Forward{kTextRowsReserve, 0}};
}

struct ForwardBytes {
  int64_t activations = 0, attention = 0;
};

// One block of a forward on one rank of a TP x SP layout. Each rank holds at most ceil(rows / sp)
// rows (dit::TensorParallel::rows_of: an even split, no padding) of the residual stream (fp32, with
// its normed copies), the FFN's two hidden tensors for its FFN shard and the RoPE tables of its
// rows: memory_guard's per-row estimate over this rank's rows. With sp > 1 its q/k/v and attention
// output for its rows and TP heads also exist on either side of the all-to-all. After the
// all-to-all it attends every row for heads / (tp * sp) heads: q/k/v, the kernel's head-major
// copies and the output (7 per row; a causal forward also holds the cache's keys and values
// concatenated with its own), and the score block of the blocked attention (dit/layers.h): fp32
// scores [heads, block, keys] of at most kDefaultScoreElements at >= 16 queries, the
// probabilities in the compute dtype when that is not fp32, the block's output. At sp = 1
// activations + attention less the score block is exactly memory_guard's estimate for the rows
// (which, in fp32 on the CPU, adds the CPU attention's score blocks of its own instead).
ForwardBytes forward_bytes(const dit::DitConfig& c, const Forward& f, int64_t tp, int64_t sp, int64_t e) {
  const int64_t local = ceil_div(f.rows, sp), all = f.rows;
  const int64_t heads = c.num_heads / (tp * sp), d = c.head_dim;
  const int64_t inner_tp = c.inner_dim() / tp, ffn_tp = c.ffn_dim / tp;
  ForwardBytes b;
  b.activations = local * (5 * c.hidden_size * kF32 + e * 2 * ffn_tp + 2 * c.rope_dims() * kF32);
  if (sp > 1) b.activations += local * e * 4 * inner_tp;
  const int64_t keys = all + f.cached;
  const int64_t qkv = f.cached > 0 ? 5 * all + 4 * keys : 7 * all;
  const int64_t block =
      std::min(all, std::max<int64_t>(16, dit::kDefaultScoreElements / std::max<int64_t>(1, heads * keys)));
  const int64_t scores = heads * block * keys * (kF32 + (e == kF32 ? 0 : e)) + heads * block * d * e;
  b.attention = heads * d * e * qkv + scores;
  return b;
}

// The distinct timesteps of every evaluation the request runs: what its AdaLN tables hold.
std::vector<dit::TimestepSet> request_timesteps(const ClipPlan& p) {
  if (p.sampler == Sampler::kCausal) {
    dit::CausalSettings s;
    s.steps = p.steps;
    s.video_shift = p.video_shift;
    s.audio_shift = p.audio_shift;
    return dit::causal_timesteps(s, p.min_steps);
  }
  return dit::evaluation_timesteps(dit::make_schedule(p.steps, p.video_shift),
                                   dit::make_schedule(p.steps, p.audio_shift));
}

// The DiT's weights on one of `tp` ranks: every declared tensor's shard in its dtype (the release's
// fp32 tensors stay fp32), as Transformer::load binds them.
int64_t weight_bytes(const dit::DitConfig& c, int tp, int64_t e, bool without_adaln) {
  int64_t n = 0;
  for (const auto& s : dit::dit_parameters(c)) {
    if (without_adaln && s.adaln) continue;
    int64_t numel = 1;
    for (int64_t d : s.local_shape(tp)) numel *= d;
    n += numel * (s.fp32 ? kF32 : e);
  }
  return n;
}

// The engine's own rule (dit::check_layout, what Transformer checks on every rank).
bool splits(const dit::DitConfig& c, int ranks, int sp) {
  try {
    dit::check_layout(c, ranks, sp);
  } catch (const Error&) {
    return false;
  }
  return true;
}

std::vector<std::pair<int, int>> legal_layouts(const dit::DitConfig& c, int ranks) {
  std::vector<std::pair<int, int>> out;
  for (int tp = ranks; tp >= 1; --tp) {
    if (ranks % tp == 0 && splits(c, ranks, ranks / tp)) out.emplace_back(tp, ranks / tp);
  }
  return out;
}

[[noreturn]] void no_layout(const dit::DitConfig& c, int ranks) {
  std::string counts;
  for (int n = kMinRanks; n <= kMaxRanks; ++n) {
    if (legal_layouts(c, n).empty()) continue;
    counts += (counts.empty() ? "" : ", ") + std::to_string(n);
  }
  throw Error(ErrorKind::kInvalidArgument,
              "ranks = " + std::to_string(ranks) + ": no TP x SP layout of " + std::to_string(ranks) +
                  " ranks splits this model: tp must divide its " + std::to_string(c.num_heads) +
                  " attention heads, its FFN width (" + std::to_string(c.ffn_dim) +
                  ") and its AdaLN width (" + std::to_string(c.adaln_width()) + "), and sp the " +
                  std::to_string(c.num_heads) + " / tp heads of each TP rank; rank counts up to " +
                  std::to_string(kMaxRanks) + " that split it: " + counts);
}

}  // namespace

int64_t LayoutFit::total() const {
  return weights + tables + latents + kv_cache + conditioning + std::max(activations + attention, decode);
}

std::string LayoutFit::name() const {
  return "TP" + std::to_string(tp) + "\u00d7SP" + std::to_string(sp);
}

std::string format_gib(int64_t bytes) {
  const double g = static_cast<double>(bytes) / (1024.0 * 1024 * 1024);
  char buf[32];
  if (g < 1) {  // a small model's or a small device's figures: "0.00 GiB" would say nothing
    std::snprintf(buf, sizeof buf, "%.1f MiB", g * 1024);
    return buf;
  }
  std::snprintf(buf, sizeof buf, g < 10 ? "%.2f GiB" : "%.1f GiB", g);
  return buf;
}

ModelInfo model_of_config(const dit::DitConfig& c) {
  ModelInfo m;
  m.dit = c;
  return m;
}

std::vector<LayoutFit> plan_layouts(const ModelInfo& m, const ClipPlan& p, const PlanOptions& o) {
  if (o.device_memory <= 0) {
    throw Error(ErrorKind::kInvalidArgument,
                o.device_memory_name + " = " + std::to_string(o.device_memory) +
                    ": give the memory of one rank's device, a positive size (80 GiB for an H100 80GB)");
  }
  if (o.ranks < kMinRanks || o.ranks > kMaxRanks) {
    throw Error(ErrorKind::kInvalidArgument, "ranks = " + std::to_string(o.ranks) + ": must be within " +
                                                 std::to_string(kMinRanks) + ".." +
                                                 std::to_string(kMaxRanks));
  }
  if (o.dtype_bytes != 2 && o.dtype_bytes != 4) {
    throw Error(ErrorKind::kInvalidArgument, "dtype of " + std::to_string(o.dtype_bytes) +
                                                 " bytes: the DiT computes in bf16 (2) or fp32 (4)");
  }
  const dit::DitConfig& c = m.dit;
  const auto layouts = legal_layouts(c, o.ranks);
  if (layouts.empty()) no_layout(c, o.ranks);

  const int64_t e = o.dtype_bytes;
  const std::vector<Forward> forwards = widest_forwards(c, p);
  const std::vector<dit::TimestepSet> sets =
      o.adaln_tables ? request_timesteps(p) : std::vector<dit::TimestepSet>{};
  std::vector<LayoutFit> out;
  for (const auto& [tp, sp] : layouts) {
    LayoutFit f;
    f.tp = tp;
    f.sp = sp;
    f.heads_per_rank = c.num_heads / (tp * sp);
    f.device_memory = o.device_memory;
    f.weights = weight_bytes(c, tp, e, o.adaln_tables);
    if (o.adaln_tables) f.tables = dit::adaln_table_bytes(c, sets, tp, static_cast<int>(e));
    for (const Forward& fw : forwards) {
      const ForwardBytes b = forward_bytes(c, fw, tp, sp, e);
      if (b.activations + b.attention <= f.activations + f.attention) continue;
      f.activations = b.activations;
      f.attention = b.attention;
      f.rows = fw.rows;
      f.rows_per_rank = ceil_div(fw.rows, sp);
    }
    // Keys and values of every block for the retained records, this rank's heads.
    const int64_t cached = forwards.front().cached;
    f.kv_cache = c.num_layers * cached * 2 * f.heads_per_rank * c.head_dim * e;
    // One rank's share as the memory guard counts it (rank 0's: it also joins the clip).
    MemoryShape one;
    one.tp = tp;
    one.activation_bytes = static_cast<int>(e);
    const MemoryEstimate est = estimate_request_memory(m, p, one);
    f.latents = est.state_bytes;
    if (o.include_decode) {
      f.decode = est.decode_bytes;
      f.conditioning = est.conditioning_bytes;
    }
    out.push_back(f);
  }
  return out;
}

std::vector<LayoutFit> plan_layouts(const dit::DitConfig& c, const ClipPlan& p, const PlanOptions& o) {
  PlanOptions without_vae = o;
  without_vae.include_decode = false;
  return plan_layouts(model_of_config(c), p, without_vae);
}

const LayoutFit& leanest(const std::vector<LayoutFit>& layouts) {
  if (layouts.empty()) throw Error(ErrorKind::kInternal, "fit planner: no layouts to choose from");
  return *std::min_element(layouts.begin(), layouts.end(),
                           [](const LayoutFit& a, const LayoutFit& b) { return a.total() < b.total(); });
}

std::string fit_summary(const std::vector<LayoutFit>& layouts) {
  const LayoutFit& best = leanest(layouts);
  std::string fitting;
  for (const auto& f : layouts) {
    if (f.fits()) fitting += (fitting.empty() ? "" : ", ") + f.name();
  }
  const std::string memory = format_gib(best.device_memory) + " per rank";
  if (!fitting.empty()) return "fits in " + memory + ": " + fitting;
  // Rounded up, so that the size named does fit.
  char need[32];
  const double gib = static_cast<double>(best.total()) / (1024.0 * 1024 * 1024);
  if (gib < 1) {
    std::snprintf(need, sizeof need, "%.1f MiB", std::ceil(gib * 1024 * 10) / 10);
  } else {
    std::snprintf(need, sizeof need, "%.1f GiB", std::ceil(gib * 10) / 10);
  }
  return "no layout fits in " + memory + "; the smallest device memory that would: " + need + " (" +
         best.name() + ")";
}

}  // namespace h3
