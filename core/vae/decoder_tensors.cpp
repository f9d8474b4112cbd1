#include "vae/decoder_tensors.h"

#include <ATen/ATen.h>

#include "vae/vit_decoder.h"

namespace h3::vae {
namespace {

// Copies `t` into rows [part * n, (part + 1) * n) of `fused`, made on the first part: the
// decoder runs q, k and v as one projection.
void into_rows(at::Tensor& fused, int64_t part, int64_t parts, const at::Tensor& t) {
  if (!fused.defined()) {
    std::vector<int64_t> s = t.sizes().vec();
    s[0] *= parts;
    fused = at::empty(s, t.options());
  }
  fused.narrow(0, part * t.size(0), t.size(0)).copy_(t);
}

}  // namespace

std::vector<DecoderTensor> decoder_tensors(const VaeConfig& c) {
  using R = TensorRole;
  using W = DecoderWeights;
  const int64_t C = c.latent_channels, D = c.dim(), F = c.ffn_inner(), Rg = c.num_register_tokens;
  std::vector<DecoderTensor> out;
  auto add = [&](std::string name, std::vector<int64_t> shape, R role,
                 std::function<void(W&, const at::Tensor&)> store) {
    out.push_back({std::move(name), std::move(shape), role, std::move(store)});
  };
  add("post_quant_conv.weight", {C, C, 1, 1, 1}, R::kLinearWeight, [C](W& w, const at::Tensor& t) {
    w.post_quant_conv_weight = t.view({C, C});
  });
  add("post_quant_conv.bias", {C}, R::kBias, [](W& w, const at::Tensor& t) { w.post_quant_conv_bias = t; });
  add("decoder.proj_in.weight", {D, C}, R::kLinearWeight,
      [](W& w, const at::Tensor& t) { w.proj_in_weight = t; });
  add("decoder.proj_in.bias", {D}, R::kBias, [](W& w, const at::Tensor& t) { w.proj_in_bias = t; });
  add("decoder.register_tokens", {1, Rg, D}, R::kRegisterTokens, [Rg, D](W& w, const at::Tensor& t) {
    w.register_tokens = t.view({Rg, D});
  });
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "decoder.transformer_blocks." + std::to_string(i) + ".";
    const auto b = static_cast<size_t>(i);
    add(p + "norm1.weight", {D}, R::kNormWeight,
        [b](W& w, const at::Tensor& t) { w.blocks[b].norm1_weight = t; });
    const char* qkv[] = {"to_q", "to_k", "to_v"};
    for (int64_t k = 0; k < 3; ++k) {
      add(p + "attn." + qkv[k] + ".weight", {D, D}, R::kLinearWeight,
          [b, k](W& w, const at::Tensor& t) { into_rows(w.blocks[b].qkv_weight, k, 3, t); });
      add(p + "attn." + qkv[k] + ".bias", {D}, R::kBias,
          [b, k](W& w, const at::Tensor& t) { into_rows(w.blocks[b].qkv_bias, k, 3, t); });
    }
    add(p + "attn.to_out.0.weight", {D, D}, R::kLinearWeight,
        [b](W& w, const at::Tensor& t) { w.blocks[b].out_weight = t; });
    add(p + "attn.to_out.0.bias", {D}, R::kBias,
        [b](W& w, const at::Tensor& t) { w.blocks[b].out_bias = t; });
    add(p + "scale1", {D}, R::kLayerScale, [b](W& w, const at::Tensor& t) { w.blocks[b].scale1 = t; });
    add(p + "norm2.weight", {D}, R::kNormWeight,
        [b](W& w, const at::Tensor& t) { w.blocks[b].norm2_weight = t; });
    add(p + "ff.net.0.proj.weight", {2 * F, D}, R::kLinearWeight,
        [b](W& w, const at::Tensor& t) { w.blocks[b].ff_in_weight = t; });
    add(p + "ff.net.0.proj.bias", {2 * F}, R::kBias,
        [b](W& w, const at::Tensor& t) { w.blocks[b].ff_in_bias = t; });
    add(p + "ff.net.2.weight", {D, F}, R::kLinearWeight,
        [b](W& w, const at::Tensor& t) { w.blocks[b].ff_out_weight = t; });
    add(p + "ff.net.2.bias", {D}, R::kBias, [b](W& w, const at::Tensor& t) { w.blocks[b].ff_out_bias = t; });
    add(p + "scale2", {D}, R::kLayerScale, [b](W& w, const at::Tensor& t) { w.blocks[b].scale2 = t; });
  }
  add("decoder.norm_out.weight", {D}, R::kNormWeight,
      [](W& w, const at::Tensor& t) { w.norm_out_weight = t; });
  add("decoder.norm_out.bias", {D}, R::kBias, [](W& w, const at::Tensor& t) { w.norm_out_bias = t; });
  add("decoder.proj_out.weight", {c.patch_values(), D}, R::kLinearWeight,
      [](W& w, const at::Tensor& t) { w.proj_out_weight = t; });
  add("decoder.proj_out.bias", {c.patch_values()}, R::kBias,
      [](W& w, const at::Tensor& t) { w.proj_out_bias = t; });
  return out;
}

}  // namespace h3::vae
