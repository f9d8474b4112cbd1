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
                const RopeTable& rope, KvCache& cache, Keep keep, bool attend_cache) {
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
  if (keep == Keep::kCommit) cache.commit(std::move(keys), std::move(values));
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

Velocity forward_chunk(const Transformer& model, const ChunkInputs& in, KvCache& cache, ChunkPass pass) {
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
  const int64_t t = in.video.size(2), lh = in.video.size(3), lw = in.video.size(4);
  const int64_t gh = lh / ph, gw = lw / pw;
  const int64_t na = in.audio.size(0), nv = t * gh * gw;

  auto tags = at::cat({at::full({na}, kTagAudio, at::kLong), at::full({nv}, kTagVideo, at::kLong)});
  auto timesteps = at::cat({at::full({na}, in.t_audio, at::kFloat), at::full({nv}, in.t_video, at::kFloat)});
  const auto mod = modulation(w, c, timesteps, model.tp(), model.adaln_tables());
  // Both embeddings in fp32, then the residual stream's dtype.
  auto audio_h = linear_fp32(w.audio_proj_in, in.audio.to(dev));
  auto video_h = linear_fp32(w.proj_in, patchify_video(in.video.to(dev, at::kFloat), ph, pw));
  auto h = at::cat({audio_h.to(stream), video_h.to(stream)});
  const auto rope =
      rope_table(chunk_positions(in.text_rows, s, gh, gw).to(dev), c.rope_freq_dim, c.rope_theta);
  run_blocks(model, h, mod, tags, rope, cache, pass == ChunkPass::kCommit ? Keep::kCommit : Keep::kNothing,
             /*attend_cache=*/true);
  if (pass == ChunkPass::kCommit) return {};

  auto y = final_modulation(h, w.norm_out, c.final_norm_eps, mod.final_table, segments_of(mod.index));
  Velocity v;
  v.audio = linear_fp32(w.audio_proj_out, y.narrow(0, 0, na));
  v.video = unpatchify_video(linear_fp32(w.proj_out, y.narrow(0, na, nv)), c.in_channels, t, lh, lw, ph, pw);
  return v;
}

}  // namespace h3::dit
