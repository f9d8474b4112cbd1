#include "vae/encoder_tensors.h"

#include <ATen/ATen.h>

#include "common/shape.h"
#include "h3/error.h"

namespace h3::vae {

std::vector<EncoderTensor> encoder_tensors(const VaeConfig& c) {
  using R = TensorRole;
  using W = EncoderWeights;
  using Tensor = at::Tensor;
  std::vector<EncoderTensor> out;
  auto add = [&](std::string name, std::vector<int64_t> shape, R role, std::function<Tensor&(W&)> slot) {
    out.push_back({std::move(name), std::move(shape), role, std::move(slot)});
  };
  // A conv's weight and bias; `k` is the (cubic) kernel size.
  auto conv = [&](const std::string& p, int64_t in, int64_t o, int64_t k, std::function<Tensor&(W&)> w,
                  std::function<Tensor&(W&)> b) {
    add(p + ".weight", {o, in, k, k, k}, R::kLinearWeight, std::move(w));
    add(p + ".bias", {o}, R::kBias, std::move(b));
  };
  auto norm = [&](const std::string& p, int64_t ch, std::function<Tensor&(W&)> w,
                  std::function<Tensor&(W&)> b) {
    add(p + ".weight", {ch}, R::kNormWeight, std::move(w));
    add(p + ".bias", {ch}, R::kBias, std::move(b));
  };
  const auto& ch = c.encoder_channels;
  const int64_t C2 = 2 * c.latent_channels;
  conv(
      "encoder.conv_in", c.in_channels, ch.front(), 3, [](W& w) -> Tensor& { return w.conv_in_weight; },
      [](W& w) -> Tensor& { return w.conv_in_bias; });
  for (size_t i = 0; i < ch.size(); ++i) {
    const std::string p = "encoder.down_blocks." + std::to_string(i) + ".";
    const int64_t level_in = i == 0 ? ch[0] : ch[i - 1];
    for (int64_t j = 0; j < c.encoder_layers_per_block; ++j) {
      const std::string r = p + "resnets." + std::to_string(j) + ".";
      const int64_t in = j == 0 ? level_in : ch[i];
      const auto jj = static_cast<size_t>(j);
      auto res = [i, jj](W& w) -> EncoderResnetWeights& { return w.levels[i].resnets[jj]; };
      norm(
          r + "norm1", in, [res](W& w) -> Tensor& { return res(w).norm1_weight; },
          [res](W& w) -> Tensor& { return res(w).norm1_bias; });
      conv(
          r + "conv1", in, ch[i], 3, [res](W& w) -> Tensor& { return res(w).conv1_weight; },
          [res](W& w) -> Tensor& { return res(w).conv1_bias; });
      norm(
          r + "norm2", ch[i], [res](W& w) -> Tensor& { return res(w).norm2_weight; },
          [res](W& w) -> Tensor& { return res(w).norm2_bias; });
      conv(
          r + "conv2", ch[i], ch[i], 3, [res](W& w) -> Tensor& { return res(w).conv2_weight; },
          [res](W& w) -> Tensor& { return res(w).conv2_bias; });
      if (in != ch[i]) {
        conv(
            r + "conv_shortcut", in, ch[i], 1, [res](W& w) -> Tensor& { return res(w).shortcut_weight; },
            [res](W& w) -> Tensor& { return res(w).shortcut_bias; });
      }
    }
    if (c.encoder_spatial_down[i] * c.encoder_temporal_down[i] > 1) {
      conv(
          p + "downsamplers.0.conv", ch[i], ch[i], 3,
          [i](W& w) -> Tensor& { return w.levels[i].down_weight; },
          [i](W& w) -> Tensor& { return w.levels[i].down_bias; });
    }
  }
  norm(
      "encoder.norm_out", ch.back(), [](W& w) -> Tensor& { return w.norm_out_weight; },
      [](W& w) -> Tensor& { return w.norm_out_bias; });
  conv(
      "encoder.conv_out", ch.back(), C2, 3, [](W& w) -> Tensor& { return w.conv_out_weight; },
      [](W& w) -> Tensor& { return w.conv_out_bias; });
  conv(
      "quant_conv", C2, C2, 1, [](W& w) -> Tensor& { return w.quant_conv_weight; },
      [](W& w) -> Tensor& { return w.quant_conv_bias; });
  return out;
}

EncoderWeights bind_encoder_weights(const VaeConfig& c,
                                    const std::function<at::Tensor(const std::string&)>& get) {
  EncoderWeights w;
  w.levels.resize(c.encoder_channels.size());
  for (auto& l : w.levels) l.resnets.resize(static_cast<size_t>(c.encoder_layers_per_block));
  for (const EncoderTensor& d : encoder_tensors(c)) {
    at::Tensor t = get(d.name);
    if (!t.defined()) {
      throw Error(ErrorKind::kNotFound, "video VAE encoder weights: tensor '" + d.name + "' is missing");
    }
    if (!at::isFloatingType(t.scalar_type())) {
      throw Error(ErrorKind::kMismatch,
                  "video VAE encoder weights: tensor '" + d.name + "' is not a floating-point tensor");
    }
    if (t.sizes() != at::IntArrayRef(d.shape)) {
      throw Error(ErrorKind::kMismatch, "video VAE encoder weights: tensor '" + d.name + "' has shape " +
                                            shape_string(t.sizes()) + " but the config needs " +
                                            shape_string(d.shape) + " (config and checkpoint disagree)");
    }
    d.slot(w) = t.to(at::kCPU, at::kFloat).contiguous();
  }
  return w;
}

EncoderWeights to_device(const VaeConfig& c, const EncoderWeights& w, const c10::Device& device) {
  EncoderWeights moved = w;  // the same levels and resnets, sharing the tensors until moved
  for (const EncoderTensor& d : encoder_tensors(c)) {
    at::Tensor& t = d.slot(moved);
    t = t.to(device);
  }
  return moved;
}

}  // namespace h3::vae
