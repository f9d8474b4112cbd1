#include "vae/video_decoder.h"

#include <ATen/ATen.h>

#include <exception>
#include <sstream>

#include "common/shape.h"
#include "dist/agree.h"
#include "dist/group.h"
#include "h3/error.h"
#include "vae/pixels.h"

namespace h3::vae {
namespace {

// Everything the loop needs, derived from the latent shape and the options alone.
struct Setup {
  ChunkPlan plan;
  TileGrid grid;
  int64_t height = 0, width = 0;  // output crop
  at::Tensor mean, std;           // per-channel statistics [1, C, 1, 1, 1], fp32
};

Setup prepare(const VaeConfig& c, const std::vector<int64_t>& shape, const DecodeOptions& o,
              const c10::Device& device) {
  if (shape.size() != 5 || shape[0] != 1 || shape[1] != c.latent_channels) {
    throw Error(ErrorKind::kInvalidArgument, "latents: shape " + shape_string(shape) + " is not [1, " +
                                                 std::to_string(c.latent_channels) +
                                                 ", T, h, w] (one clip of normalised DiT latents)");
  }
  if (shape[3] < 1 || shape[4] < 1) {
    throw Error(ErrorKind::kInvalidArgument, "latents: empty spatial extent " + shape_string(shape));
  }
  Setup s;
  s.plan = plan_chunks(shape[2], temporal_params(c));
  const bool tiling = o.tiling.value_or(c.tiling);
  s.grid = plan_tiles(shape[3], shape[4], c.patch_size, tiling, c.tile_size, c.tile_overlap_min);
  const int64_t full_h = shape[3] * c.patch_size, full_w = shape[4] * c.patch_size;
  s.height = o.height > 0 ? o.height : full_h;
  s.width = o.width > 0 ? o.width : full_w;
  if (o.height < 0 || o.width < 0 || s.height > full_h || s.width > full_w) {
    throw Error(ErrorKind::kInvalidArgument, "output size " + std::to_string(s.height) + "x" +
                                                 std::to_string(s.width) +
                                                 " must be positive and fit the decoded " +
                                                 std::to_string(full_h) + "x" + std::to_string(full_w));
  }
  const at::Tensor mean =
      at::tensor(c.latents_mean, at::TensorOptions().dtype(at::kDouble)).to(device, at::kFloat);
  const at::Tensor std =
      at::tensor(c.latents_std, at::TensorOptions().dtype(at::kDouble)).to(device, at::kFloat);
  s.mean = mean.view({1, -1, 1, 1, 1});
  s.std = std.view({1, -1, 1, 1, 1});
  return s;
}

// Latent indices (into the time axis of the whole latent) of clip i: head latent first on
// clip 0, then the body slice with pad latents repeating the last body latent, then the
// tail latent on the last clip.
std::vector<int64_t> clip_indices(const ChunkPlan& p, int64_t i) {
  const int64_t first_body = p.head ? 1 : 0;
  const int64_t body_len = p.latent_frames - (p.head ? 1 : 0) - (p.tail ? 1 : 0);
  std::vector<int64_t> idx;
  if (i == 0 && p.head) idx.push_back(0);
  for (int64_t j = p.clip_token_begin(i); j < p.clip_token_end(i); ++j) {
    idx.push_back(first_body + std::min(j, body_len - 1));
  }
  if (i == p.num_clips - 1 && p.tail) idx.push_back(p.latent_frames - 1);
  return idx;
}

using dist::agree_or_throw;
using Failure = dist::LocalFailure;

// This rank's rows of the output, [y0, y1) of the cropped height: after the tiles are
// gathered every rank stitches, blends and converts its own band, so rank 0 is left with
// only the assembly of the bands and the sink (the serial part of a multi-rank decode).
struct Band {
  int64_t y0 = 0, y1 = 0;
};

Band band_of(int64_t height, int rank, int ranks) {
  return {height * rank / ranks, height * (rank + 1) / ranks};
}

// One chunk's frames in one rank's band, before the bands are put together.
struct BandChunk {
  PlannedChunk planned;
  at::Tensor frames;      // uint8 [n, y1 - y0, width, 3] on the decode device
  at::Tensor frames_f32;  // fp32, when float frames were asked for
};

// Temporal assembly of one band of stitched clips and the pad trim, then the pixel
// processor: what every rank does for its band, the same plan on every rank, so every
// rank yields the same chunks in the same order.
class BandEmitter {
 public:
  BandEmitter(const Setup& s, const DecodeOptions& o, Band band) : s_(s), opts_(o), band_(band) {}

  // Consumes stitched clip i [3, F, y1 - y0, W] and returns the chunks it completes.
  std::vector<BandChunk> clip(int64_t i, at::Tensor dec) {
    out_.clear();
    const ChunkPlan& p = s_.plan;
    const int64_t rt = p.ratio_t;
    if (i == 0 && p.head) {
      part(dec.narrow(1, rt - 1, 1));  // the head latent's last frame
      dec = dec.narrow(1, rt, dec.size(1) - rt);
    }
    at::Tensor tail;
    if (i == p.num_clips - 1 && p.tail) {
      tail = dec.narrow(1, dec.size(1) - 1, 1);
      dec = dec.narrow(1, 0, dec.size(1) - rt);
    }
    const int64_t main_end = std::min(p.clip_frames, dec.size(1));
    at::Tensor main = dec.narrow(1, p.frame_pre_padding, main_end - p.frame_pre_padding);
    if (overlap_.defined()) {
      main = blend(overlap_, main, p.frame_overlap, 1);
      overlap_ = at::Tensor();
    }
    part(main);
    const int64_t ov = dec.size(1) - p.clip_frames - p.frame_pre_padding;
    if (p.token_overlap > 0 && ov > 0) {
      // Owned copy: the clip's tensors are released before the next clip is decoded.
      overlap_ = dec.narrow(1, p.clip_frames + p.frame_pre_padding, ov).clone();
    }
    if (i == p.num_clips - 1) {
      if (overlap_.defined()) part(overlap_);
      overlap_ = at::Tensor();
      if (tail.defined()) part(tail);
      if (next_part_ != static_cast<int64_t>(p.parts.size())) {
        throw Error(ErrorKind::kInternal, "temporal plan mismatch: " + std::to_string(next_part_) + " of " +
                                              std::to_string(p.parts.size()) + " parts produced");
      }
    }
    return std::move(out_);
  }

 private:
  void part(const at::Tensor& frames) {
    const ChunkPlan& p = s_.plan;
    const int64_t k = next_part_++;
    if (k >= static_cast<int64_t>(p.parts.size()) ||
        frames.size(1) != p.parts[static_cast<size_t>(k)].frames) {
      throw Error(ErrorKind::kInternal, "temporal plan mismatch at part " + std::to_string(k) + ": " +
                                            std::to_string(frames.size(1)) + " frames decoded");
    }
    if (next_chunk_ >= static_cast<int64_t>(p.chunks.size())) return;
    const PlannedChunk& pc = p.chunks[static_cast<size_t>(next_chunk_)];
    if (pc.part != k) return;  // a part the pad trim removed entirely
    ++next_chunk_;
    BandChunk c;
    c.planned = pc;
    Pixels px = to_pixels(frames.narrow(1, 0, pc.frames), band_.y1 - band_.y0, s_.width, opts_.float_frames);
    c.frames = std::move(px.u8);
    c.frames_f32 = std::move(px.unit);
    out_.push_back(std::move(c));
  }

  const Setup& s_;
  const DecodeOptions& opts_;
  const Band band_;
  at::Tensor overlap_;  // the previous clip's overlap frames [3, n, y1 - y0, W]
  int64_t next_part_ = 0;
  int64_t next_chunk_ = 0;
  std::vector<BandChunk> out_;
};

// Rank 0's end of the loop: the chunks, whole, to the sink. A sink error is kept
// (failure()) and ends the emission.
class Delivery {
 public:
  Delivery(const Setup& s, ChunkSink* sink) : s_(s), sink_(sink) {}

  // `frames` (and `frames_f32`, when defined): the whole chunk, on any device.
  void chunk(const PlannedChunk& pc, int64_t index, const at::Tensor& frames, const at::Tensor& frames_f32) {
    if (failure_) return;
    Chunk c;
    c.index = index;
    c.first_frame = pc.first_frame;
    c.total_frames = s_.plan.output_frames;
    c.final = pc.first_frame + pc.frames == s_.plan.output_frames;
    // Sinks get contiguous CPU frames whatever device decoded them (a no-op on the CPU).
    c.frames = frames.cpu().contiguous();
    if (frames_f32.defined()) c.frames_f32 = frames_f32.cpu().contiguous();
    try {
      sink_->on_chunk(c);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kCancelled) {
        failure_.capture();  // a cancel through the sink stays a cancel
      } else {
        wrap_sink_error(c, e.what());
      }
      return;
    } catch (const std::exception& e) {
      wrap_sink_error(c, e.what());
      return;
    } catch (...) {
      wrap_sink_error(c, "unknown exception");
      return;
    }
    ++delivered_;
    frames_ += pc.frames;
  }

  const Failure& failure() const { return failure_; }
  int64_t delivered() const { return delivered_; }
  int64_t frames() const { return frames_; }

 private:
  void wrap_sink_error(const Chunk& c, const std::string& what) {
    try {
      throw Error(ErrorKind::kCallback, "the chunk sink failed on chunk " + std::to_string(c.index) +
                                            " (frames " + std::to_string(c.first_frame) + ".." +
                                            std::to_string(c.first_frame + c.frames.size(0) - 1) +
                                            "): " + what);
    } catch (...) {
      failure_.capture();
    }
  }

  const Setup& s_;
  ChunkSink* sink_;
  int64_t delivered_ = 0;
  int64_t frames_ = 0;
  Failure failure_;
};

// The bands of one chunk, top to bottom, as one tensor [n, height, width, 3].
at::Tensor join_bands(const std::vector<at::Tensor>& bands) {
  return bands.size() == 1 ? bands[0] : at::cat(bands, 1);
}

// Concatenates the chunks of one clip into the frames of decode().
class ConcatSink : public ChunkSink {
 public:
  explicit ConcatSink(DecodedVideo& out) : out_(out) {}
  void on_chunk(const Chunk& c) override {
    if (!out_.frames.defined()) {
      std::vector<int64_t> shape = c.frames.sizes().vec();
      shape[0] = c.total_frames;
      out_.frames = at::empty(shape, c.frames.options());
      if (c.frames_f32.defined()) out_.frames_f32 = at::empty(shape, c.frames_f32.options());
    }
    out_.frames.narrow(0, c.first_frame, c.frames.size(0)).copy_(c.frames);
    if (c.frames_f32.defined())
      out_.frames_f32.narrow(0, c.first_frame, c.frames.size(0)).copy_(c.frames_f32);
    out_.chunk_frames.push_back(c.frames.size(0));
  }

 private:
  DecodedVideo& out_;
};

}  // namespace

TemporalParams temporal_params(const VaeConfig& c) {
  TemporalParams tp;
  tp.clip_length = c.clip_length;
  tp.token_drop = c.token_drop;
  tp.ratio_t = c.patch_size_t;
  tp.isolated_first_frame = c.isolated_first_frame;
  tp.isolated_last_frame = c.isolated_last_frame;
  return tp;
}

VideoDecoder::VideoDecoder(VaeConfig config, DecoderWeights weights)
    : config_(std::move(config)), weights_(std::move(weights)) {
  config_.validate("video VAE config");
  if (static_cast<int64_t>(weights_.blocks.size()) != config_.num_layers) {
    throw Error(ErrorKind::kMismatch, "video VAE: " + std::to_string(weights_.blocks.size()) +
                                          " decoder blocks bound for a config of " +
                                          std::to_string(config_.num_layers) + " layers");
  }
}

VideoDecoder VideoDecoder::to(const c10::Device& device) const {
  return VideoDecoder(config_, to_device(weights_, device));
}

ChunkPlan VideoDecoder::plan(int64_t latent_frames) const {
  return plan_chunks(latent_frames, temporal_params(config_));
}

DecodeReport VideoDecoder::decode_chunks(const at::Tensor& latents, ChunkSink* sink, dist::Group& g,
                                         const DecodeOptions& opts) const {
  if (!latents.defined()) throw Error(ErrorKind::kInvalidArgument, "latents: no tensor given");
  if (!at::isFloatingType(latents.scalar_type())) {
    throw Error(ErrorKind::kInvalidArgument, "latents: dtype must be floating point");
  }
  TensorLatents source(latents);
  return decode_chunks(source, sink, g, opts);
}

DecodeReport VideoDecoder::decode_chunks(LatentSource& latents, ChunkSink* sink, dist::Group& g,
                                         const DecodeOptions& opts) const {
  // Who owns the sink is settled before any work, by every rank together.
  dist::agree_owner(g, sink != nullptr);
  const int rank = g.rank(), ranks = g.size();
  const bool owner = rank == 0;

  // The latents must be valid, and the same shape on every rank: the shape decides the
  // number of clips and tiles, hence every later collective.
  Setup s;
  Failure setup_failure;
  const std::vector<int64_t> latent_shape = latents.shape();
  try {
    s = prepare(config_, latent_shape, opts, device());
  } catch (...) {
    setup_failure.capture();
  }
  const std::string shape = setup_failure ? std::string("invalid") : shape_string(latent_shape);
  const std::string root_shape = g.broadcast_string(shape, 0);
  if (!setup_failure && shape != root_shape) {
    try {
      throw Error(ErrorKind::kMismatch, "rank " + std::to_string(rank) + " got latents " + shape +
                                            " but rank 0 got " + root_shape +
                                            ": every rank must decode the same");
    } catch (...) {
      setup_failure.capture();
    }
  }
  agree_or_throw(g, setup_failure);

  const ChunkPlan& plan = s.plan;
  const int64_t num_tiles = s.grid.count();
  DecodeReport report;
  report.tiles_per_clip = num_tiles;
  report.rank_local_tiles = num_tiles < ranks;
  const bool gather = ranks > 1 && !report.rank_local_tiles;
  const Band band = band_of(s.height, rank, ranks);
  BandEmitter emitter(s, opts, band);
  Delivery delivery(s, sink);
  int64_t chunk_index = 0;
  // Buffers the gathers reuse from clip to clip (each clip's tiles and bands are done with
  // before the next clip's gathers): fresh pages for every clip cost more than the copies.
  at::Tensor staged_tiles, gathered_tiles, gathered_frames, gathered_f32;

  for (int64_t i = 0; i < plan.num_clips; ++i) {
    // Outside the clip's failure capture: a generating source runs collectives of its own and
    // fails every rank together (its errors reach the caller as they are).
    const at::Tensor clip_latents = latents.select(clip_indices(plan, i));
    Failure local;
    std::vector<at::Tensor> mine;
    try {
      // De-normalised clip by clip: nothing of the size of the whole latent is allocated.
      const at::Tensor clip = clip_latents.to(device(), at::kFloat) * s.std + s.mean;
      const int64_t step = gather ? ranks : 1;
      const int64_t first = gather ? rank : 0;
      for (int64_t k = first; k < num_tiles; k += step) {
        mine.push_back(decode_tile(config_, weights_, tile_latent(clip, s.grid, k)));
        ++report.tiles_decoded;
      }
    } catch (...) {
      local.capture();
    }

    std::vector<at::Tensor> tiles;
    if (!gather) {
      tiles = std::move(mine);
    } else {
      // A rank that failed must not leave its peers waiting in the gather.
      agree_or_throw(g, local);
      if (!staged_tiles.defined()) staged_tiles = at::empty({0}, mine.front().options());
      at::stack_out(staged_tiles, mine, 0);
      mine.clear();
      const std::vector<at::Tensor> all = g.all_gather(staged_tiles, &gathered_tiles);
      tiles.resize(static_cast<size_t>(num_tiles));
      for (int r = 0; r < ranks; ++r) {
        const at::Tensor& got = all[static_cast<size_t>(r)];
        for (int64_t m = 0; m < got.size(0); ++m) tiles[static_cast<size_t>(m * ranks + r)] = got[m];
      }
    }

    // Every rank stitches, blends and converts its band of rows.
    std::vector<BandChunk> chunks;
    if (!local) {
      try {
        chunks = emitter.clip(i, stitch_rows(tiles, s.grid, band.y0, band.y1));
      } catch (...) {
        local.capture();
      }
    }
    tiles.clear();
    // A rank that failed must not leave its peers waiting in the bands' gathers either.
    if (ranks > 1) agree_or_throw(g, local);
    std::vector<std::vector<at::Tensor>> frames(chunks.size()), frames_f32(chunks.size());
    for (size_t c = 0; c < chunks.size(); ++c) {
      // The joined chunk is a fresh tensor (a concatenation) at 2 ranks and more, so the sink
      // never sees these buffers.
      frames[c] = ranks > 1 ? g.all_gather(chunks[c].frames, chunks.size() == 1 ? &gathered_frames : nullptr)
                            : std::vector<at::Tensor>{chunks[c].frames};
      if (opts.float_frames) {
        frames_f32[c] = ranks > 1
                            ? g.all_gather(chunks[c].frames_f32, chunks.size() == 1 ? &gathered_f32 : nullptr)
                            : std::vector<at::Tensor>{chunks[c].frames_f32};
      }
    }

    Failure boundary = std::move(local);
    // Rank 0 hands the chunks to the sink, which may wait for a slow consumer for
    // any time: its peers wait for it in run_on_owner (no limit while rank 0 is
    // alive), not in the boundary's collective.
    g.run_on_owner(
        0,
        [&] {
          if (!owner || boundary) return;
          try {
            for (size_t c = 0; c < chunks.size(); ++c) {
              delivery.chunk(chunks[c].planned, chunk_index + static_cast<int64_t>(c), join_bands(frames[c]),
                             opts.float_frames ? join_bands(frames_f32[c]) : at::Tensor());
            }
          } catch (...) {
            boundary.capture();
          }
        },
        "waiting for rank 0 to hand a chunk to its sink");
    chunk_index += static_cast<int64_t>(chunks.size());
    chunks.clear();
    frames.clear();
    frames_f32.clear();
    if (owner && !boundary && delivery.failure()) boundary = delivery.failure();
    ++report.clips;
    // Chunk boundary: a failed sink or rank stops every rank here.
    agree_or_throw(g, boundary);
  }
  report.chunks_delivered = delivery.delivered();
  report.frames_delivered = delivery.frames();
  return report;
}

TensorLatents::~TensorLatents() = default;

at::Tensor TensorLatents::select(const std::vector<int64_t>& t) {
  return z_.index_select(2, at::tensor(t, at::TensorOptions().dtype(at::kLong)).to(z_.device()));
}

DecodeReport VideoDecoder::decode_chunks(const at::Tensor& latents, ChunkSink& sink,
                                         const DecodeOptions& opts) const {
  auto g = dist::make_single_group();
  return decode_chunks(latents, &sink, *g, opts);
}

DecodedVideo VideoDecoder::decode(const at::Tensor& latents, dist::Group& g,
                                  const DecodeOptions& opts) const {
  DecodedVideo out;
  if (g.rank() == 0) {
    ConcatSink sink(out);
    out.report = decode_chunks(latents, &sink, g, opts);
  } else {
    out.report = decode_chunks(latents, nullptr, g, opts);
  }
  return out;
}

DecodedVideo VideoDecoder::decode(const at::Tensor& latents, const DecodeOptions& opts) const {
  auto g = dist::make_single_group();
  return decode(latents, *g, opts);
}

}  // namespace h3::vae
