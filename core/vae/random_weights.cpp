#include "vae/random_weights.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "vae/vit_decoder.h"

namespace h3::vae {

std::map<std::string, at::Tensor> random_decoder_tensors(const VaeConfig& c, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const auto opt = at::TensorOptions().dtype(at::kFloat);
  const int64_t C = c.latent_channels, D = c.dim(), F = c.ffn_inner(), R = c.num_register_tokens;
  auto normal = [&](std::vector<int64_t> shape, double std, double mean = 0.0) {
    return at::randn(shape, gen, opt) * std + mean;
  };
  auto linear_w = [&](int64_t out, int64_t in) {
    return normal({out, in}, 1.0 / std::sqrt(static_cast<double>(in)));
  };
  std::map<std::string, at::Tensor> m;
  m["post_quant_conv.weight"] = linear_w(C, C).view({C, C, 1, 1, 1});
  m["post_quant_conv.bias"] = normal({C}, 0.1);
  m["decoder.proj_in.weight"] = linear_w(D, C);
  m["decoder.proj_in.bias"] = normal({D}, 0.1);
  m["decoder.register_tokens"] = normal({1, R, D}, 1.0);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "decoder.transformer_blocks." + std::to_string(i) + ".";
    m[p + "norm1.weight"] = normal({D}, 0.1, 1.0);
    for (const char* qkv : {"to_q", "to_k", "to_v"}) {
      m[p + "attn." + qkv + ".weight"] = linear_w(D, D);
      m[p + "attn." + qkv + ".bias"] = normal({D}, 0.1);
    }
    m[p + "attn.to_out.0.weight"] = linear_w(D, D);
    m[p + "attn.to_out.0.bias"] = normal({D}, 0.1);
    m[p + "scale1"] = normal({D}, 0.3);
    m[p + "norm2.weight"] = normal({D}, 0.1, 1.0);
    m[p + "ff.net.0.proj.weight"] = linear_w(2 * F, D);
    m[p + "ff.net.0.proj.bias"] = normal({2 * F}, 0.1);
    m[p + "ff.net.2.weight"] = linear_w(D, F);
    m[p + "ff.net.2.bias"] = normal({D}, 0.1);
    m[p + "scale2"] = normal({D}, 0.3);
  }
  m["decoder.norm_out.weight"] = normal({D}, 0.1, 1.0);
  m["decoder.norm_out.bias"] = normal({D}, 0.1);
  m["decoder.proj_out.weight"] = linear_w(c.patch_values(), D);
  m["decoder.proj_out.bias"] = normal({c.patch_values()}, 0.1);
  return m;
}

VaeConfig small_config(int64_t layers, int64_t heads, int64_t head_dim, uint64_t stats_seed) {
  VaeConfig c;
  c.num_layers = layers;
  c.num_heads = heads;
  c.head_dim = head_dim;
  at::Generator gen = at::detail::createCPUGenerator(stats_seed);
  const at::Tensor mean = at::randn({c.latent_channels}, gen, at::TensorOptions().dtype(at::kDouble)) * 0.5;
  const at::Tensor std = at::rand({c.latent_channels}, gen, at::TensorOptions().dtype(at::kDouble)) + 0.5;
  c.latents_mean.assign(mean.data_ptr<double>(), mean.data_ptr<double>() + c.latent_channels);
  c.latents_std.assign(std.data_ptr<double>(), std.data_ptr<double>() + c.latent_channels);
  c.validate("small video VAE config");
  return c;
}

}  // namespace h3::vae
