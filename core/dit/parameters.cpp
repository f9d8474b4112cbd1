#include "dit/parameters.h"

namespace h3::dit {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

// The attention + SwiGLU tensors shared by refiner blocks and transformer blocks.
void add_block_core(std::vector<ParamSpec>& out, const std::string& p, const DitConfig& c) {
  const int64_t h = c.hidden_size, inner = c.inner_dim();
  out.push_back({p + "norm1.weight", {h}});
  out.push_back({p + "attn.to_q.weight", {inner, h}});
  out.push_back({p + "attn.to_k.weight", {inner, h}});
  out.push_back({p + "attn.to_v.weight", {inner, h}});
  out.push_back({p + "attn.norm_q.weight", {c.head_dim}});
  out.push_back({p + "attn.norm_k.weight", {c.head_dim}});
  out.push_back({p + "attn.to_out.0.weight", {h, inner}});
  out.push_back({p + "norm2.weight", {h}});
  out.push_back({p + "ff.net.0.proj.weight", {2 * c.ffn_dim, h}});
  out.push_back({p + "ff.net.2.weight", {h, c.ffn_dim}});
}

}  // namespace

std::vector<ParamSpec> dit_parameters(const DitConfig& c) {
  const int64_t h = c.hidden_size;
  std::vector<ParamSpec> out;
  auto linear = [&](const std::string& name, int64_t o, int64_t i, bool fp32, bool adaln = false) {
    out.push_back({name + ".weight", {o, i}, fp32, adaln});
    out.push_back({name + ".bias", {o}, fp32, adaln});
  };
  linear("proj_in", h, c.video_row_width(), true);
  linear("audio_proj_in", h, c.audio_in_channels, true);
  linear("context_embedder", h, c.text_dim, false);
  linear("time_embedder.linear_1", c.time_embed_hidden_dim, c.freq_dim, true);
  linear("time_embedder.linear_2", c.time_embed_dim, c.time_embed_hidden_dim, true);
  for (int64_t i = 0; i < c.num_refiner_layers; ++i) {
    add_block_core(out, "token_refiner.refiner_blocks." + std::to_string(i) + ".", c);
  }
  out.push_back({"token_refiner.final_norm.weight", {h}});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "transformer_blocks." + std::to_string(i) + ".";
    add_block_core(out, p, c);
    linear(p + "adaln_proj.linear", c.adaln_width(), c.time_embed_dim, false, true);
  }
  out.push_back({"norm_out.norm.weight", {h}});
  linear("norm_out.linear", c.final_adaln_width(), c.time_embed_dim, false, true);
  linear("proj_out", c.video_row_width(), h, true);
  linear("audio_proj_out", c.audio_in_channels, h, true);
  return out;
}

ParamCount count_parameters(const std::vector<ParamSpec>& specs) {
  ParamCount n;
  for (const auto& s : specs) {
    const int64_t e = s.numel();
    n.total += e;
    if (s.adaln) n.adaln += e;
    n.release_bytes += e * (s.fp32 ? 4 : 2);
  }
  return n;
}

}  // namespace h3::dit
