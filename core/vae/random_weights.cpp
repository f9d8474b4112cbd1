#include "vae/random_weights.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "vae/decoder_tensors.h"
#include "vae/encoder_tensors.h"

namespace h3::vae {

std::map<std::string, at::Tensor> random_decoder_tensors(const VaeConfig& c, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const auto opt = at::TensorOptions().dtype(at::kFloat);
  std::map<std::string, at::Tensor> m;
  // Drawn in declaration order from one generator: the same seed gives the same weights.
  for (const DecoderTensor& d : decoder_tensors(c)) {
    double std = 0.1, mean = 0.0;
    switch (d.role) {
      case TensorRole::kLinearWeight: std = 1.0 / std::sqrt(static_cast<double>(d.shape[1])); break;
      case TensorRole::kBias: std = 0.1; break;
      case TensorRole::kNormWeight: mean = 1.0; break;
      case TensorRole::kLayerScale: std = 0.3; break;
      case TensorRole::kRegisterTokens: std = 1.0; break;
    }
    m[d.name] = at::randn(d.shape, gen, opt) * std + mean;
  }
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

std::map<std::string, at::Tensor> random_encoder_tensors(const VaeConfig& c, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::map<std::string, at::Tensor> out;
  for (const EncoderTensor& e : encoder_tensors(c)) {
    auto t = at::randn(e.shape, gen, at::TensorOptions().dtype(at::kFloat));
    if (e.role == TensorRole::kBias) {
      t.mul_(0.01);
    } else if (e.role == TensorRole::kNormWeight) {
      t.mul_(0.01).add_(1.0);
    } else {
      int64_t fan_in = 1;
      for (size_t d = 1; d < e.shape.size(); ++d) fan_in *= e.shape[d];
      t.mul_(1.0 / std::sqrt(static_cast<double>(fan_in)));
    }
    out.emplace(e.name, t);
  }
  return out;
}

}  // namespace h3::vae
