#include "dit/causal.h"

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "common/shape.h"
#include "dit/layers.h"
#include "dit/packed_sequence.h"
#include "h3/error.h"

namespace h3::dit {
namespace {

[[noreturn]] void bad(const std::string& what) {
  throw Error(ErrorKind::kInvalidArgument, what);
}

// What a forward does with the rows' keys and values.
enum class Keep { kNothing, kCommit, kReplaceFirst };

// Runs the blocks over rows `h` (in place) against the cache (the prompt's prefill attends only
// itself); unless kNothing, stages every layer's keys and values and writes them once after the
// last layer (all layers evict together).
void run_blocks(const Transformer& model, at::Tensor& h, const Modulation& mod, const at::Tensor& tags,
                const RopeTable& rope, KvCache& cache, Keep keep, bool attend_cache,
                int64_t placed = kPromptPlace) {
  const auto& c = model.config();
  const auto& w = model.weights();
  // Under sequence parallelism each rank runs its share of the rows; the cache holds every row
  // for this rank's heads (what attention sees after the all-to-all).
  OwnRows own = own_rows(h, rope, mod.index * 3 + tags.clamp_min(0), model.tp());
  std::vector<at::Tensor> keys(w.blocks.size()), values(w.blocks.size());
  for (size_t b = 0; b < w.blocks.size(); ++b) {
    KvContext kv;
    if (attend_cache) {
      kv.past_k = cache.keys(static_cast<int64_t>(b));
      kv.past_v = cache.values(static_cast<int64_t>(b));
    }
    if (keep != Keep::kNothing) {
      kv.own_k = &keys[b];
      kv.own_v = &values[b];
    }
    auto table = modality_table(mod.block_rows.select(1, static_cast<int64_t>(b)), c.hidden_size);
    transformer_block_(own.h, w.blocks[b], c, table, own.segs, own.rope, model.tp(), &kv);
  }
  h = model.tp().gather_rows(own.h);
  if (keep == Keep::kCommit) cache.commit(std::move(keys), std::move(values), placed);
  if (keep == Keep::kReplaceFirst) cache.replace_first(std::move(keys), std::move(values));
}

}  // namespace

void prefill_text(const Transformer& model, const at::Tensor& text, const at::Tensor& text_tags,
                  KvCache& cache) {
  const auto& c = model.config();
  const auto& w = model.weights();
  if (!text.defined() || text.dim() != 2 || text.size(0) < 1 || text.size(1) != c.text_dim) {
    bad("text prefill: the text is " +
        (text.defined() ? shape_string(text.sizes()) : std::string("missing")) + ": give [L, " +
        std::to_string(c.text_dim) + "] encoder states with L >= 1");
  }
  const int64_t l = text.size(0);
  const auto dev = w.proj_in.weight.device();
  const auto stream = w.context_embedder.weight.scalar_type();
  auto tags = text_tags.defined() ? text_tags.to(at::kCPU, at::kLong) : at::full({l}, kTagText, at::kLong);
  auto h = token_refiner(linear_in_dtype(w.context_embedder, text.to(dev)), w, c, model.tp()).to(stream);
  const auto mod =
      modulation(w, c, at::full({l}, kCleanTimestep, at::kFloat), model.tp(), model.adaln_tables());
  auto pos = at::zeros({l, 3}, at::kDouble);
  pos.select(1, 0).copy_(at::arange(l, at::kDouble));
  const auto rope = rope_table(pos.to(dev), c.rope_freq_dim, c.rope_theta);
  run_blocks(model, h, mod, tags, rope, cache, cache.committed() == 0 ? Keep::kCommit : Keep::kReplaceFirst,
             /*attend_cache=*/false);
}

namespace {

// One chunk's rows before the blocks: checked, embedded, tagged and placed.
struct ChunkRows {
  at::Tensor h;          // [na + nv, H] audio rows, then video rows, in the residual stream's dtype
  at::Tensor tags;       // [na + nv] kTagAudio / kTagVideo
  at::Tensor timesteps;  // [na + nv] fp32
  at::Tensor positions;  // [na + nv, 3] fp64
  int64_t na = 0, nv = 0, t = 0, lh = 0, lw = 0;
};

ChunkRows chunk_rows(const Transformer& model, const ChunkInputs& in, const KvCache& cache) {
  const auto& c = model.config();
  const auto& w = model.weights();
  const ChunkSpan& s = in.span;
  const int64_t ph = c.patch[1], pw = c.patch[2];
  if (!in.video.defined() || in.video.dim() != 5 || in.video.size(1) != c.in_channels ||
      in.video.size(2) != s.video_latents() || in.video.size(3) % ph != 0 || in.video.size(4) % pw != 0) {
    bad("chunk " + std::to_string(s.index) + ": video latents " +
        (in.video.defined() ? shape_string(in.video.sizes()) : std::string("missing")) + " do not fit [1, " +
        std::to_string(c.in_channels) + ", " + std::to_string(s.video_latents()) + ", h, w]");
  }
  if (!in.audio.defined() || in.audio.dim() != 2 || in.audio.size(0) != 2 * s.audio_latents() ||
      in.audio.size(1) != c.audio_in_channels) {
    bad("chunk " + std::to_string(s.index) + ": audio rows " +
        (in.audio.defined() ? shape_string(in.audio.sizes()) : std::string("missing")) + " do not fit [" +
        std::to_string(2 * s.audio_latents()) + ", " + std::to_string(c.audio_in_channels) + "]");
  }
  if (cache.committed() == 0) throw Error(ErrorKind::kInternal, "chunk forward before the text prefill");
  const auto dev = w.proj_in.weight.device();
  const auto stream = w.context_embedder.weight.scalar_type();
  ChunkRows r;
  r.t = in.video.size(2);
  r.lh = in.video.size(3);
  r.lw = in.video.size(4);
  const int64_t gh = r.lh / ph, gw = r.lw / pw;
  r.na = in.audio.size(0);
  r.nv = r.t * gh * gw;
  r.tags = at::cat({at::full({r.na}, kTagAudio, at::kLong), at::full({r.nv}, kTagVideo, at::kLong)});
  r.timesteps = at::cat({at::full({r.na}, in.t_audio, at::kFloat), at::full({r.nv}, in.t_video, at::kFloat)});
  // Both embeddings in fp32, then the residual stream's dtype.
  auto audio_h = linear_fp32(w.audio_proj_in, in.audio.to(dev));
  auto video_h = linear_fp32(w.proj_in, patchify_video(in.video.to(dev, at::kFloat), ph, pw));
  r.h = at::cat({audio_h.to(stream), video_h.to(stream)});
  r.positions =
      chunk_positions(in.text_rows, in.position_shift == 0 ? s : shifted_span(s, in.position_shift), gh, gw);
  return r;
}

// The chunk's velocities from the final rows `y` [na + nv, H] (fp32 after the final modulation).
Velocity velocities(const Transformer& model, const ChunkRows& r, const at::Tensor& y) {
  const auto& c = model.config();
  const auto& w = model.weights();
  Velocity v;
  v.audio = linear_fp32(w.audio_proj_out, y.narrow(0, 0, r.na));
  v.video = unpatchify_video(linear_fp32(w.proj_out, y.narrow(0, r.na, r.nv)), c.in_channels, r.t, r.lh, r.lw,
                             c.patch[1], c.patch[2]);
  return v;
}

}  // namespace

Velocity forward_chunk(const Transformer& model, const ChunkInputs& in, KvCache& cache, ChunkPass pass) {
  const auto& c = model.config();
  const auto& w = model.weights();
  const auto dev = w.proj_in.weight.device();
  ChunkRows r = chunk_rows(model, in, cache);
  const auto mod = modulation(w, c, r.timesteps, model.tp(), model.adaln_tables());
  const auto rope = rope_table(r.positions.to(dev), c.rope_freq_dim, c.rope_theta);
  run_blocks(model, r.h, mod, r.tags, rope, cache,
             pass == ChunkPass::kCommit ? Keep::kCommit : Keep::kNothing,
             /*attend_cache=*/true, in.span.index - in.position_shift);
  if (pass == ChunkPass::kCommit) return {};
  auto y = final_modulation(r.h, w.norm_out, c.final_norm_eps, mod.final_table, segments_of(mod.index));
  return velocities(model, r, y);
}

void move_window_back(const Transformer& model, KvCache& cache, int64_t chunks) {
  const auto& c = model.config();
  // The turn's angle: the t axis only (h = w = 0 leave those dims as they are), the same for
  // every row and head.
  const auto pos =
      at::tensor(std::vector<double>{-chunk_start_time(chunks), 0.0, 0.0}, at::kDouble).view({1, 3});
  const auto dev = model.weights().proj_in.weight.device();
  const RopeTable turn = rope_table(pos.to(dev), c.rope_freq_dim, c.rope_theta);
  cache.move_window(chunks, [&](const at::Tensor& keys) {
    at::Tensor k = keys.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
    apply_rope_(k, turn);
    return k;
  });
}

std::vector<Velocity> forward_chunks(const Transformer& model, const std::vector<ChunkInputs>& in,
                                     const std::vector<KvCache*>& caches, ChunkPass pass) {
  const auto& c = model.config();
  const auto& w = model.weights();
  if (in.empty() || in.size() != caches.size()) {
    throw Error(ErrorKind::kInternal, "forward_chunks: " + std::to_string(in.size()) + " chunks and " +
                                          std::to_string(caches.size()) + " caches");
  }
  const auto dev = w.proj_in.weight.device();
  std::vector<ChunkRows> rows;
  std::vector<at::Tensor> h, tags, timesteps, positions;
  StreamsKv streams;
  for (size_t i = 0; i < in.size(); ++i) {
    rows.push_back(chunk_rows(model, in[i], *caches[i]));
    h.push_back(rows.back().h);
    tags.push_back(rows.back().tags);
    timesteps.push_back(rows.back().timesteps);
    positions.push_back(rows.back().positions);
    streams.rows.push_back(rows.back().na + rows.back().nv);
  }
  at::Tensor all = at::cat(h);
  const at::Tensor all_tags = at::cat(tags);
  const auto mod = modulation(w, c, at::cat(timesteps), model.tp(), model.adaln_tables());
  const auto rope = rope_table(at::cat(positions).to(dev), c.rope_freq_dim, c.rope_theta);
  OwnRows own = own_rows(all, rope, mod.index * 3 + all_tags.clamp_min(0), model.tp());
  const bool commit = pass == ChunkPass::kCommit;
  std::vector<std::vector<at::Tensor>> keys(in.size(), std::vector<at::Tensor>(w.blocks.size()));
  std::vector<std::vector<at::Tensor>> values(keys);
  for (size_t b = 0; b < w.blocks.size(); ++b) {
    streams.kv.assign(in.size(), KvContext{});
    for (size_t i = 0; i < in.size(); ++i) {
      streams.kv[i].past_k = caches[i]->keys(static_cast<int64_t>(b));
      streams.kv[i].past_v = caches[i]->values(static_cast<int64_t>(b));
      if (commit) {
        streams.kv[i].own_k = &keys[i][b];
        streams.kv[i].own_v = &values[i][b];
      }
    }
    auto table = modality_table(mod.block_rows.select(1, static_cast<int64_t>(b)), c.hidden_size);
    transformer_block_(own.h, w.blocks[b], c, table, own.segs, own.rope, model.tp(), nullptr, &streams);
  }
  all = model.tp().gather_rows(own.h);
  std::vector<Velocity> out(in.size());
  if (commit) {
    for (size_t i = 0; i < in.size(); ++i) {
      caches[i]->commit(std::move(keys[i]), std::move(values[i]), in[i].span.index - in[i].position_shift);
    }
    return out;
  }
  auto y = final_modulation(all, w.norm_out, c.final_norm_eps, mod.final_table, segments_of(mod.index));
  int64_t begin = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    out[i] = velocities(model, rows[i], y.narrow(0, begin, streams.rows[i]));
    begin += streams.rows[i];
  }
  return out;
}

}  // namespace h3::dit
