#include "dit/transformer.h"

#include <ATen/ATen.h>

#include <utility>
#include <vector>

#include "dit/layers.h"
#include "h3/error.h"
#include "io/shard_plan.h"

namespace h3::dit {

void check_tp(const DitConfig& c, int tp) {
  io::check_dit_tp(tp, c.num_heads, c.ffn_dim, c.adaln_width());
}

int check_layout(const DitConfig& c, int ranks, int sp) {
  if (sp < 1 || ranks % sp != 0) {
    throw Error(ErrorKind::kInvalidArgument, "sp " + std::to_string(sp) + " on " + std::to_string(ranks) +
                                                 " ranks: sp must divide the ranks (tp x sp = ranks)");
  }
  const int tp = ranks / sp;
  check_tp(c, tp);
  if ((c.num_heads / tp) % sp != 0) {
    throw Error(ErrorKind::kInvalidArgument, "tp " + std::to_string(tp) + " x sp " + std::to_string(sp) +
                                                 ": sp must divide the " + std::to_string(c.num_heads / tp) +
                                                 " heads each TP rank holds (" + std::to_string(c.num_heads) +
                                                 " heads / tp " + std::to_string(tp) + ")");
  }
  return tp;
}

Transformer::Transformer(DitConfig config, DitWeights weights, dist::Group* group, int sp)
    : config_(std::move(config)), weights_(std::move(weights)), tp_(group, sp) {
  check_layout(config_, tp_.size() * tp_.sp_size(), tp_.sp_size());
}

void Transformer::use_group(dist::Group* group) {
  const TensorParallel next(group, tp_.sp_size());
  if (next.rank() != tp_.rank() || next.size() != tp_.size() || next.sp_rank() != tp_.sp_rank()) {
    throw Error(ErrorKind::kInternal, "transformer: shards of rank " + std::to_string(tp_.rank()) + " of " +
                                          std::to_string(tp_.size()) + " cannot serve rank " +
                                          std::to_string(next.rank()) + " of " + std::to_string(next.size()));
  }
  tp_ = next;
}

bool Transformer::time_mlp_adapted() const {
  return weights_.time_linear_1.lora.defined() || weights_.time_linear_2.lora.defined();
}

void Transformer::refresh_adaln_tables() {
  // The tables hold rows of the time MLP's output: an adapter on the time MLP changes it.
  const auto sets = tables_.sets();
  const bool drop = !adaln_resident();
  tables_ = AdalnTables();
  use_adaln_tables(sets, drop);
}

LoraSummary Transformer::attach_lora(const std::string& path) {
  const bool time_adapted = time_mlp_adapted();
  auto summary = dit::attach_lora(weights_, config_, path, tp_.rank(), tp_.size());
  if (!tables_.empty() && (time_adapted || time_mlp_adapted())) refresh_adaln_tables();
  return summary;
}

void Transformer::detach_lora() {
  const bool time_adapted = time_mlp_adapted();
  dit::detach_lora(weights_);
  if (!tables_.empty() && time_adapted) refresh_adaln_tables();
}

void Transformer::use_adaln_tables(const std::vector<TimestepSet>& sets, bool drop_projections) {
  if (tables_.covers(sets) && adaln_resident() != drop_projections) return;
  if (!adaln_resident()) reload_adaln_projections();
  tables_ = AdalnTables();  // the old tables go before the new ones are made: memory stays flat
  tables_ = AdalnTables::compute(weights_, config_, sets);
  if (!drop_projections) return;
  for (auto& b : weights_.blocks) {
    b.adaln.weight = at::Tensor();
    b.adaln.bias = at::Tensor();
  }
  weights_.norm_out_linear.weight = at::Tensor();
  weights_.norm_out_linear.bias = at::Tensor();
}

int64_t Transformer::resident_bytes() const {
  int64_t n = tables_.bytes();
  for (const auto& [name, t] : weights_.named()) n += static_cast<int64_t>(t.nbytes());
  declare_adapters(weights_, [&](const std::string&, const Adapter& a) {
    if (a.defined()) n += static_cast<int64_t>(a.down.nbytes() + a.up.nbytes());
  });
  return n;
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
  const Modulation mod = modulation(w, c, s.timesteps, tp_, adaln_tables());
  const auto& inv = mod.index;

  // Embeddings: refined text, audio and video rows, in packed order.
  const auto& L = s.layout;
  auto text = linear_in_dtype(w.context_embedder, s.text.to(dev));
  auto text_h = token_refiner(text, w, c, tp_);
  auto audio_h = linear_fp32(w.audio_proj_in, s.audio_rows.to(dev));
  auto video_h = linear_fp32(w.proj_in, s.video_rows.to(dev));
  std::vector<at::Tensor> parts{text_h.to(stream)};
  if (L.keyframes > 0) {
    // The condition rows in packed order: pictures' through the video projection, sound's
    // through the audio one.
    const at::Tensor pictures = s.keyframe_rows.size(0) > 0
                                    ? linear_fp32(w.proj_in, s.keyframe_rows.to(dev)).to(stream)
                                    : at::Tensor();
    const at::Tensor sound = s.condition_audio_rows.size(0) > 0
                                 ? linear_fp32(w.audio_proj_in, s.condition_audio_rows.to(dev)).to(stream)
                                 : at::Tensor();
    int64_t vo = 0, ao = 0;
    for (const ConditionRun& r : s.condition_runs) {
      parts.push_back(r.audio ? sound.narrow(0, ao, r.rows) : pictures.narrow(0, vo, r.rows));
      (r.audio ? ao : vo) += r.rows;
    }
  }
  parts.push_back(audio_h.to(stream));
  parts.push_back(video_h.to(stream));
  auto h = at::cat(parts, 0);

  auto rope = rope_table(s.positions.to(dev), c.rope_freq_dim, c.rope_theta);
  // Under sequence parallelism each rank runs its share of the rows through the blocks.
  OwnRows own = own_rows(h, rope, inv * 3 + s.tags.to(at::kLong).clamp_min(0), tp_);
  for (size_t b = 0; b < w.blocks.size(); ++b) {
    auto table = modality_table(mod.block_rows.select(1, static_cast<int64_t>(b)), hidden);
    transformer_block_(own.h, w.blocks[b], c, table, own.segs, own.rope, tp_);
  }
  h = tp_.gather_rows(own.h);

  // Final layer on the generated audio and video rows only (text and keyframe rows carry no output).
  const int64_t out_rows = L.audio + L.video;
  auto y = final_modulation(h.narrow(0, L.audio_begin(), out_rows), w.norm_out, c.final_norm_eps,
                            mod.final_table, segments_of(inv.narrow(0, L.audio_begin(), out_rows)));
  Velocity v;
  v.audio = linear_fp32(w.audio_proj_out, y.narrow(0, 0, L.audio));
  auto video_rows = linear_fp32(w.proj_out, y.narrow(0, L.audio, L.video));
  v.video = unpatchify_video(video_rows, c.in_channels, L.t, L.h, L.w, c.patch[1], c.patch[2]);
  return v;
}

}  // namespace h3::dit
