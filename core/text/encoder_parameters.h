// The Qwen3-VL language model's tensors that H3's conditioning reads, declared once: for every
// tensor its checkpoint name (the release's prefix), full shape, tensor-parallel split and the
// member of EncoderWeights it binds to. The loader (text_encoder.cpp), named(), the random
// weights of the tiny models, `h3 inspect` and the checkpoint's name check all follow from
// declare_encoder_parameters().
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/types.h"
#include "text/encoder_config.h"

namespace h3::text {

struct EncoderLayerWeights {
  at::Tensor input_layernorm, post_attention_layernorm;  // [hidden]
  at::Tensor q_proj, k_proj, v_proj;                     // [local heads * head_dim, hidden]
  at::Tensor q_norm, k_norm;                             // [head_dim]
  at::Tensor o_proj;                                     // [hidden, local heads * head_dim]
  at::Tensor gate_proj, up_proj;                         // [local intermediate, hidden]
  at::Tensor down_proj;                                  // [hidden, local intermediate]
};

struct EncoderWeights {
  at::Tensor embed_tokens;                  // [vocab, hidden], whole on every rank
  std::vector<EncoderLayerWeights> layers;  // layers 0..K-1: conditioning reads hidden_states[K]
};

struct EncoderParameter {
  std::string name;            // checkpoint name
  std::vector<int64_t> shape;  // full (unsharded) shape
  // Tensor parallelism: q/k/v/gate/up by output rows (each rank whole query and key-value heads),
  // o/down by input columns; norms and embed_tokens whole.
  io::Split split = io::Split::kReplicated;
  int64_t numel() const;
};

// Calls fn(spec, slot) for embed_tokens and every tensor of w.layers.size() layers, in the
// checkpoint's (sorted) order within a layer; `slot` is the member of `w` (const or not).
template <typename Weights, typename Fn>
void declare_encoder_parameters(const EncoderConfig& c, Weights& w, Fn&& fn) {
  using io::Split;
  const std::string lm = "model.language_model.";
  const int64_t H = c.hidden_size, D = c.head_dim, F = c.intermediate_size;
  auto one = [&](std::string name, std::vector<int64_t> shape, auto& slot, Split split = Split::kReplicated) {
    fn(EncoderParameter{std::move(name), std::move(shape), split}, slot);
  };
  one(lm + "embed_tokens.weight", {c.vocab_size, H}, w.embed_tokens);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const std::string p = lm + "layers." + std::to_string(i) + ".";
    auto& l = w.layers[i];
    one(p + "input_layernorm.weight", {H}, l.input_layernorm);
    one(p + "mlp.down_proj.weight", {H, F}, l.down_proj, Split::kRow);
    one(p + "mlp.gate_proj.weight", {F, H}, l.gate_proj, Split::kColumn);
    one(p + "mlp.up_proj.weight", {F, H}, l.up_proj, Split::kColumn);
    one(p + "post_attention_layernorm.weight", {H}, l.post_attention_layernorm);
    one(p + "self_attn.k_norm.weight", {D}, l.k_norm);
    one(p + "self_attn.k_proj.weight", {c.kv_width(), H}, l.k_proj, Split::kColumn);
    one(p + "self_attn.o_proj.weight", {H, c.q_width()}, l.o_proj, Split::kRow);
    one(p + "self_attn.q_norm.weight", {D}, l.q_norm);
    one(p + "self_attn.q_proj.weight", {c.q_width(), H}, l.q_proj, Split::kColumn);
    one(p + "self_attn.v_proj.weight", {c.kv_width(), H}, l.v_proj, Split::kColumn);
  }
}

// The tensors that conditioning on hidden_states[layers] reads: embed_tokens and every tensor of
// layers 0..layers-1, in declaration order.
std::vector<EncoderParameter> encoder_parameters(const EncoderConfig& c, int64_t layers);
// The final norm, which the conditioning never reads (a whole checkpoint has it).
EncoderParameter final_norm_parameter(const EncoderConfig& c);

}  // namespace h3::text
