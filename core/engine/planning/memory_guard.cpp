#include "engine/planning/memory_guard.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "common/cpu_attention.h"
#include "dit/chunk_layout.h"
#include "dit/frames.h"
#include "dit/layers.h"
#include "engine/planning/plan.h"
#include "h3/error.h"
#include "text/vision_config.h"
#include "text/vision_parameters.h"
#include "vae/chunk_plan.h"
#include "vae/encoder_tensors.h"
#include "vae/tiling.h"
#include "vae/video_decoder.h"
#include "vae/vit_decoder.h"

namespace h3 {
namespace {

constexpr int64_t kF32 = 4;

int64_t sum_of(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

// The DiT forward of one rank at its widest: one block's activations (the fp32 residual stream
// and its normed copies, q/k/v and the attention kernel's head-major copies, the FFN's two
// hidden tensors, this rank's shard of the heads and the FFN), plus the RoPE tables of the rows;
// in fp32 on the CPU also each thread's block of attention scores over the rows. (bf16 on an
// AVX512_BF16 CPU without AMX takes the GEMM blocks too, its scores in bf16: up to 8 MiB a thread
// not counted here, where the estimate stays the same on every CPU.)
int64_t dit_bytes_per_rank(const dit::DitConfig& c, int64_t rows, const MemoryShape& s) {
  const int64_t tp = std::max(1, s.tp), e = s.activation_bytes;
  const int64_t inner = c.inner_dim() / tp, ffn = c.ffn_dim / tp;
  const int64_t per_row = 5 * c.hidden_size * kF32 + e * (7 * inner + 2 * ffn) + 2 * c.rope_dims() * kF32;
  const int64_t scores =
      !s.on_gpus && e == kF32
          ? cpu_attention_score_bytes(rows, rows, c.num_heads / tp, dit::kDefaultScoreElements, s.cpu_threads)
          : 0;
  return rows * per_row + scores;
}

// Rank 0's uint8 frames of one clip: what reaches the host from a decode wherever it runs.
int64_t clip_frame_bytes(const ModelInfo& m, const ClipPlan& p) {
  const vae::ChunkPlan cp = vae::plan_chunks(p.latent_frames, vae::temporal_params(m.vae));
  return (cp.tokens_chunk_size + cp.token_overlap) * cp.ratio_t * p.canvas_height * p.canvas_width *
         m.vae.out_channels;
}

// The video decode of one clip: every rank stages its tiles and receives every tile of the clip
// (fp32: two copies), the ranks' bands stitch and blend the whole clip twice over (fp32), rank 0
// joins it as uint8; each rank runs the ViT decoder on one tile at a time.
int64_t decode_bytes(const ModelInfo& m, const ClipPlan& p, const MemoryShape& s) {
  const vae::VaeConfig& v = m.vae;
  const vae::ChunkPlan cp = vae::plan_chunks(p.latent_frames, vae::temporal_params(v));
  const int64_t clip_latents = cp.tokens_chunk_size + cp.token_overlap;
  const int64_t clip_frames = clip_latents * cp.ratio_t;
  const int64_t lh = p.canvas_height / dit::kVaeSpatialRatio, lw = p.canvas_width / dit::kVaeSpatialRatio;
  const vae::TileGrid g =
      vae::plan_tiles(lh, lw, dit::kVaeSpatialRatio, v.tiling, v.tile_size, v.tile_overlap_min);
  const int64_t tiles_px = sum_of(g.y.lengths) * sum_of(g.x.lengths);
  const int64_t clip_px = p.canvas_height * p.canvas_width;
  const int64_t channels = v.out_channels;
  const int64_t gathered = clip_frames * tiles_px * channels * kF32;
  int64_t tile_tokens = 0;
  for (int64_t ty : g.y.lengths) {
    for (int64_t tx : g.x.lengths) {
      tile_tokens =
          std::max(tile_tokens, clip_latents * (ty / dit::kVaeSpatialRatio) * (tx / dit::kVaeSpatialRatio));
    }
  }
  tile_tokens += v.num_register_tokens;
  // On the CPU also each thread's block of attention scores (vae/vit_decoder.cpp: the GEMM blocks
  // where the CPU's choice takes them; the fused kernel's are smaller) and the blocks' head-major
  // copies of q, k and v.
  const int64_t scores = s.on_gpus ? 0
                                   : cpu_attention_score_bytes(tile_tokens, tile_tokens, v.num_heads,
                                                               vae::kAttentionScoreElements, s.cpu_threads) +
                                         3 * tile_tokens * v.dim() * kF32;
  const int64_t vit = tile_tokens * (8 * v.dim() + 2 * v.ffn_inner()) * kF32 +
                      clip_latents * v.patch_values() *
                          (tiles_px / (dit::kVaeSpatialRatio * dit::kVaeSpatialRatio)) /
                          std::max<int64_t>(1, g.count()) * kF32 +
                      scores;
  return s.ranks_here * (2 * gathered + vit) + 2 * clip_frames * clip_px * channels * kF32 +
         clip_frame_bytes(m, p);
}

// FL2VA's and Ref2VA's parts for `p`'s pictures: keyframes on the canvas, references at their
// own sizes, one at a time (the largest counts). Activations calibrated on the release's sizes at
// 1344 x 768 (docs/performance.md, "Image conditioning": +349 MiB for the encoder's tiles, the
// tower's about 2.2 GB beside its weights): the encoder holds about 12 maps of a tile at its first
// level's width; the tower, per frame of patches, two copies of the attention scores and 16 rows
// of its width per patch.
// Ref2VA's sound, on rank 0 alone: the audio VAE's encoder in fp32 (kept once read) and, for the
// longest sound, about five maps of its first width over both channels (calibrated on the release's
// sizes, docs/performance.md "Image conditioning": +1118 MiB for 10.1 s, 346 MB of it weights).
int64_t sound_bytes(const ModelInfo& m, const ClipPlan& p) {
  int64_t samples = 0;
  for (const PlannedReference& r : p.references) samples = std::max(samples, r.audio_latents * m.audio_hop);
  if (samples == 0) return 0;
  return m.audio_encoder_params * kF32 + 5 * 2 * samples * std::max<int64_t>(m.audio_encoder_dim, 1) * kF32;
}

int64_t conditioning_bytes(const ModelInfo& m, const ClipPlan& p, const MemoryShape& s) {
  if (p.keyframe_anchors.empty() && p.references.empty()) return 0;
  // The largest picture: the canvas for keyframes, else the largest reference; a video's
  // encoder holds a clip of frames at a time.
  int64_t pic_w = p.canvas_width, pic_h = p.canvas_height, frames = 1;
  if (p.keyframe_anchors.empty()) {
    pic_w = pic_h = 0;
    for (const PlannedReference& r : p.references) {
      if (r.width * r.height > pic_w * pic_h) pic_w = r.width, pic_h = r.height;
      if (r.kind == ReferenceKind::kVideo) frames = m.vae.clip_length;
    }
  }
  const vae::VaeConfig& v = m.vae;
  int64_t encoder_params = 0;
  for (const auto& t : vae::encoder_tensors(v)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    encoder_params += n;
  }
  const int64_t tile = std::min<int64_t>(v.tile_size, std::max(pic_w, pic_h));
  const int64_t encoder_act =
      12 * tile * tile * frames * (v.encoder_channels.empty() ? 128 : v.encoder_channels[0]) * kF32;
  int64_t tower_params = 0, tower_act = 0;
  if (m.vision) {  // without one (embeddings instead of a prompt): the encoder alone
    const text::VisionConfig& t = *m.vision;
    for (const auto& q : text::vision_parameters(t)) tower_params += q.numel();
    const text::ImageProcessorConfig proc;
    const auto hw = text::smart_resize(pic_h, pic_w, t.patch_size * t.spatial_merge_size, proc.min_pixels,
                                       proc.max_pixels);
    const int64_t patches = (hw[0] / t.patch_size) * (hw[1] / t.patch_size);
    tower_act = 2 * patches * patches * t.num_heads * kF32 + 16 * patches * t.hidden_size * kF32;
  }
  return s.ranks_here * ((encoder_params * kF32 + tower_params * s.activation_bytes) +
                         std::max(encoder_act, tower_act)) +
         sound_bytes(m, p);
}

int64_t read_int_file(const char* path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return -1;
  try {
    return std::stoll(word);
  } catch (...) {
    return -1;
  }
}

// The cgroup (v2) this process is in, from /proc/self/cgroup ("0::/path").
std::string own_cgroup_dir() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  }
  return {};
}

}  // namespace

std::string request_text(const ClipPlan& p) {
  return std::to_string(p.width) + "x" + std::to_string(p.height) + ", " +
         (p.endless ? std::string("endless") : std::to_string(p.num_frames) + " frames");
}

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  char buf[48];
  if (b >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", b / (1024.0 * 1024 * 1024));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  }
  return buf;
}

int64_t parse_bytes(const std::string& text, const std::string& what) {
  const auto bad = [&] {
    return Error(
        ErrorKind::kInvalidArgument,
        what + " = \"" + text + "\": give a byte count, optionally with K, M, G or T (binary: 8G = 8 GiB)");
  };
  size_t used = 0;
  long double n = 0;
  try {
    n = std::stold(text, &used);
  } catch (...) {
    throw bad();
  }
  if (n < 0 || text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) throw bad();
  std::string unit = text.substr(used);
  if (unit.size() > 1 && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (unit == "iB") unit.clear();
  long double scale = 1;
  if (unit.empty() || unit == "B" || unit == "b") {
    scale = 1;
  } else if (unit.size() == 1 || (unit.size() == 2 && unit[1] == 'i')) {
    switch (std::toupper(static_cast<unsigned char>(unit[0]))) {
      case 'K': scale = 1024.0L; break;
      case 'M': scale = 1024.0L * 1024; break;
      case 'G': scale = 1024.0L * 1024 * 1024; break;
      case 'T': scale = 1024.0L * 1024 * 1024 * 1024; break;
      default: throw bad();
    }
  } else {
    throw bad();
  }
  const long double bytes = n * scale;
  if (bytes > static_cast<long double>(std::numeric_limits<int64_t>::max())) throw bad();
  return static_cast<int64_t>(bytes);
}

MemoryShape memory_shape_of(int ranks_here, int world_ranks, int sp, const std::string& compute_dtype,
                            const std::string& device, int cpu_threads) {
  MemoryShape s;
  s.ranks_here = ranks_here;
  s.tp = world_ranks / std::max(1, sp);
  s.activation_bytes = compute_dtype == "bf16" ? 2 : 4;
  s.on_gpus = device == "cuda";
  s.cpu_threads = std::max(1, cpu_threads);
  return s;
}

int64_t endless_video_latents(const ModelInfo& m) {
  const vae::ChunkPlan cp =
      vae::plan_chunks(dit::kChunkLatents + dit::kTailLatents, vae::temporal_params(m.vae));
  return cp.tokens_chunk_size + (cp.tokens_chunk_size + cp.token_overlap) + dit::kChunkLatents - 1;
}

int64_t endless_audio_latents(const ModelInfo& m) {
  return dit::full_chunk(2).audio_end + 2 * m.audio_context_latents;
}

int64_t widest_causal_chunk_rows(const dit::DitConfig& c, const ClipPlan& p) {
  const int64_t grid_h = p.canvas_height / dit::kVaeSpatialRatio / c.patch[1];
  const int64_t grid_w = p.canvas_width / dit::kVaeSpatialRatio / c.patch[2];
  const std::vector<dit::ChunkSpan> chunks =
      p.endless ? std::vector<dit::ChunkSpan>{dit::full_chunk(0), dit::full_chunk(1), dit::full_chunk(2)}
                : dit::cut_chunks(p.latent_frames, p.audio_latents);
  int64_t rows = 0;
  for (const auto& span : chunks) rows = std::max(rows, span.rows(grid_h, grid_w));
  return rows;
}

MemoryEstimate estimate_request_memory(const ModelInfo& m, const ClipPlan& p, const MemoryShape& s) {
  MemoryEstimate e;
  const int64_t lh = p.canvas_height / dit::kVaeSpatialRatio, lw = p.canvas_width / dit::kVaeSpatialRatio;
  const dit::DitConfig& c = m.dit;
  // An endless stream's latents leave once the decode and the audio decoder are past them
  // (stage_causal.cpp): however long it runs, it keeps the decode's clip, the clip before it
  // (dropped when the next is asked for) and the newest chunk beyond the clip's end; and three
  // chunks' audio with the audio decoder's context on either side.
  const int64_t latent_frames = p.endless ? endless_video_latents(m) : p.latent_frames;
  const int64_t audio_latents = p.endless ? endless_audio_latents(m) : p.audio_latents;
  const int64_t video_rows =
      latent_frames * (lh / c.patch[1]) * (lw / c.patch[2]) / std::max<int64_t>(1, c.patch[0]);
  const int64_t audio_rows = 2 * audio_latents;
  if (p.sampler == Sampler::kCausal) {
    // A chunk's rows at a time, attending the KV cache: its records' keys and values in every
    // layer and, per block, the scores over them.
    const int64_t chunk_rows = widest_causal_chunk_rows(c, p);
    const int64_t cache_rows = kTextRowsReserve + std::max<int64_t>(0, p.cache_records - 1) * chunk_rows;
    const int64_t tp = std::max(1, s.tp);
    e.dit_rows = chunk_rows;
    e.kv_bytes = s.ranks_here * c.num_layers * cache_rows * 2 * (c.inner_dim() / tp) * s.activation_bytes;
    e.dit_bytes = s.ranks_here * (dit_bytes_per_rank(c, chunk_rows, s) +
                                  chunk_rows * (cache_rows + chunk_rows) * (c.num_heads / tp) * kF32) +
                  e.kv_bytes;
    if (p.prompt_switch == PromptSwitch::kRecache) {
      // The kept chunks' commit inputs, fp32 in host memory also with GPUs (the sampler's
      // latents live on the CPU), on every rank (CausalSampler::recache_bytes): one
      // per chunk record the cache keeps (cache_records - 1: not the text's), each a chunk's video
      // latents and its audio rows (a chunk has at most 29 audio latents a channel).
      const int64_t records = p.cache_records < 0 ? 0 : std::max<int64_t>(0, p.cache_records - 1);
      const int64_t per_chunk = c.in_channels * dit::kChunkLatents * lh * lw + 2 * 29 * c.audio_in_channels;
      e.recache_bytes = s.ranks_here * records * per_chunk * kF32;
    }
  } else {
    // The condition blocks and the pictures' vision blocks are rows of every forward too.
    e.dit_rows = kTextRowsReserve + p.vision_rows + p.condition_rows + audio_rows + video_rows;
    e.dit_bytes = s.ranks_here * dit_bytes_per_rank(c, e.dit_rows, s);
  }
  e.decode_bytes = decode_bytes(m, p, s);
  e.conditioning_bytes = conditioning_bytes(m, p, s);
  if (s.on_gpus) {
    e.dit_bytes = 0;
    e.kv_bytes = 0;
    e.decode_bytes = clip_frame_bytes(m, p);
    e.conditioning_bytes = 0;
  }
  // Per rank: the noise, the latents, the velocity and the next step's latents (video and
  // audio), and the decode's fp32 copy; rank 0 also holds the soundtrack's waveform (an endless
  // stream's leaves chunk by chunk).
  const int64_t latent_values = c.in_channels * latent_frames * lh * lw + audio_rows * c.audio_in_channels;
  const int64_t waveform = p.endless ? 0 : 2 * std::max<int64_t>(0, p.audio_samples) * kF32;
  e.state_bytes = s.ranks_here * 5 * latent_values * kF32 + waveform;
  e.margin_bytes =
      (e.state_bytes + e.dit_bytes + e.decode_bytes + e.conditioning_bytes + e.recache_bytes) / 10 +
      (int64_t{64} << 20);
  return e;
}

int64_t available_memory_bytes() {
  int64_t avail = -1;
  {
    std::ifstream in("/proc/meminfo");
    std::string key;
    int64_t kb = 0;
    std::string unit;
    while (in >> key >> kb) {
      std::getline(in, unit);
      if (key == "MemAvailable:") {
        avail = kb * 1024;
        break;
      }
    }
  }
  const std::string cg = own_cgroup_dir();
  if (!cg.empty()) {
    const int64_t max = read_int_file((cg + "/memory.max").c_str());
    const int64_t cur = read_int_file((cg + "/memory.current").c_str());
    if (max > 0 && cur >= 0) {
      const int64_t left = std::max<int64_t>(0, max - cur);
      avail = avail < 0 ? left : std::min(avail, left);
    }
  }
  return std::max<int64_t>(0, avail);
}

void check_request_memory(const ModelInfo& m, const GenerationRequest& req, const ClipPlan& p,
                          const MemoryShape& s, int64_t limit_bytes) {
  const bool given = limit_bytes > 0;
  const int64_t limit = given ? limit_bytes : available_memory_bytes();
  if (limit <= 0) return;  // nothing known to compare with (no /proc/meminfo): not refused
  const MemoryEstimate e = estimate_request_memory(m, p, s);
  if (e.peak() <= limit) return;

  const auto fits = [&](int64_t width, int64_t height, int64_t frames) {
    GenerationRequest r = req;
    r.width = width;
    r.height = height;
    r.num_frames = frames;
    return estimate_request_memory(m, make_plan(m, r), s).peak() <= limit;
  };
  // The longest clip that fits at this size (the decode's clip does not shrink with the length,
  // so there may be none), and the largest size of this aspect that fits at this length. An
  // endless stream has no length to shorten (its estimate does not depend on one): only the size.
  int64_t best_frames = 0;
  for (int64_t lo = kMinFrames, hi = p.endless ? 0 : p.num_frames - 1; lo <= hi;) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (fits(p.width, p.height, mid)) {
      best_frames = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  int64_t best_w = 0, best_h = 0;
  for (int64_t k = 63; k >= 1 && best_w == 0; --k) {  // k/64 of the requested size, largest first
    const int64_t w = std::max(kMinSide, p.width * k / 64 / 16 * 16);
    const int64_t h = std::max(kMinSide, p.height * k / 64 / 16 * 16);
    if (fits(w, h, p.num_frames)) {
      best_w = w;
      best_h = h;
    }
  }

  const int64_t largest = std::max({e.dit_bytes, e.decode_bytes, e.conditioning_bytes});
  std::ostringstream msg;
  msg << "the request (" << request_text(p) << ") needs about " << format_bytes(e.peak())
      << " beside the loaded weights ("
      << (largest == e.dit_bytes ? "the DiT's activations over " + std::to_string(e.dit_rows) +
                                       " rows: " + format_bytes(e.dit_bytes)
          : largest == e.decode_bytes
              ? "the video decode of one clip: " + format_bytes(e.decode_bytes)
              : "the references' encoders and vision tower: " + format_bytes(e.conditioning_bytes))
      << ", for " << s.ranks_here << (s.ranks_here == 1 ? " rank" : " ranks") << " in this process), but "
      << format_bytes(limit)
      << (given ? " is the max-memory limit" : " is available (MemAvailable, or the cgroup's memory.max)")
      << ". ";
  if (p.endless) {
    msg << "An endless stream at " << p.width << "x" << p.height << " needs this however long it runs; ";
    if (best_w > 0) {
      msg << "at most " << best_w << "x" << best_h << " fits";
    } else {
      msg << "no size of this aspect fits";
    }
  } else {
    if (best_frames > 0) {
      msg << "At " << p.width << "x" << p.height << " at most " << best_frames << " frames fit";
    } else {
      msg << "No length fits at " << p.width << "x" << p.height;
    }
    if (best_w > 0) {
      msg << "; at " << p.num_frames << " frames at most " << best_w << "x" << best_h << " fits";
    }
  }
  msg << ". Ask for less, use more ranks on other hosts, or raise the limit with max-memory / "
         "--max-memory if the estimate is too cautious for this machine.";
  throw Error(ErrorKind::kOutOfMemory, msg.str());
}

}  // namespace h3
