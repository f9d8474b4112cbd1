#include "dit/transformer.h"

#include <ATen/ATen.h>

#include <utility>
#include <vector>

#include "common/error.h"
#include "dit/layers.h"
#include "io/shard_plan.h"

namespace h3::dit {

void check_tp(const DitConfig& c, int tp) {
  io::check_dit_tp(tp, c.num_heads, c.ffn_dim, c.adaln_width());
}

Transformer::Transformer(DitConfig config, DitWeights weights, dist::Group* group)
    : config_(std::move(config)), weights_(std::move(weights)), tp_(group) {
  check_tp(config_, tp_.size());
}

void Transformer::use_group(dist::Group* group) {
  const TensorParallel next(group);
  if (next.rank() != tp_.rank() || next.size() != tp_.size()) {
    throw Error(ErrorKind::kInternal, "transformer: shards of rank " + std::to_string(tp_.rank()) + " of " +
                                          std::to_string(tp_.size()) + " cannot serve rank " +
                                          std::to_string(next.rank()) + " of " + std::to_string(next.size()));
  }
  tp_ = next;
}

LoraSummary Transformer::attach_lora(const std::string& path) {
  return dit::attach_lora(weights_, config_, path, tp_.rank(), tp_.size());
}

void Transformer::detach_lora() {
  dit::detach_lora(weights_);
}

Velocity Transformer::forward(const DitInputs& in) const {
  return forward(pack(config_, in));
}

Velocity Transformer::forward(const PackedSequence& s) const {
  const auto& c = config_;
  const auto& w = weights_;
  const int64_t hidden = c.hidden_size;
  const auto dev = w.proj_in.weight.device();
  const auto stream = w.context_embedder.weight.scalar_type();  // residual-stream precision

  // Time embedding and AdaLN tables: once per evaluation, for the distinct timesteps only.
  const Modulation mod = modulation(w, c, s.timesteps, tp_);
  const auto& inv = mod.index;
  auto mod_segs = segments_of(inv * 3 + s.tags.to(at::kLong).clamp_min(0));

  // Embeddings: refined text, audio and video rows, in packed order.
  const auto& L = s.layout;
  auto text = linear_in_dtype(w.context_embedder, s.text.to(dev));
  auto text_h = token_refiner(text, w, c, tp_);
  auto audio_h = linear_fp32(w.audio_proj_in, s.audio_rows.to(dev));
  auto video_h = linear_fp32(w.proj_in, s.video_rows.to(dev));
  auto h = at::cat({text_h.to(stream), audio_h.to(stream), video_h.to(stream)}, 0);

  auto rope = rope_table(s.positions.to(dev), c.rope_freq_dim, c.rope_theta);
  for (size_t b = 0; b < w.blocks.size(); ++b) {
    auto table = modality_table(mod.block_rows.select(1, static_cast<int64_t>(b)), hidden);
    transformer_block_(h, w.blocks[b], c, table, mod_segs, rope, tp_);
  }

  // Final layer on the audio and video rows only (text rows carry no output).
  const int64_t out_rows = L.audio + L.video;
  auto y = final_modulation(h.narrow(0, L.text, out_rows), w.norm_out, c.final_norm_eps, mod.final_table,
                            segments_of(inv.narrow(0, L.text, out_rows)));
  Velocity v;
  v.audio = linear_fp32(w.audio_proj_out, y.narrow(0, 0, L.audio));
  auto video_rows = linear_fp32(w.proj_out, y.narrow(0, L.audio, L.video));
  v.video = unpatchify_video(video_rows, c.in_channels, L.t, L.h, L.w, c.patch[1], c.patch[2]);
  return v;
}

}  // namespace h3::dit
