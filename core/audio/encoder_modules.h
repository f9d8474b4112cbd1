// The audio VAE encoder's modules, declared once, in checkpoint order (the decoder's are in
// decoder_modules.h): DAC's waveform encoder `encoder.block.<i>` (a convolution, one stage per
// stride of three dilated residual units, a Snake and a strided convolution, then a Snake and
// the trunk's last convolution), `pre_block` (the causal-attention projection onto the latent
// width) and the posterior heads. Binding a checkpoint and writing random weights both walk it
// (audio/weight_visitors.h), as do counting and moving to a device (audio/audio_encoder.cpp); the
// struct it fills is EncoderWeights (audio/audio_encoder.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "audio/audio_encoder.h"
#include "audio/config.h"
#include "audio/weight_visitors.h"

namespace h3::audio {

template <typename Visitor>
void declare_encoder_modules(const AudioVaeConfig& c, EncoderWeights& w, Visitor&& v) {
  using Bias = ConvSpec::Bias;
  v.conv(ConvSpec{"encoder.block.0", {c.encoder_dim, 1, 7}}, w.conv_in);
  int64_t dim = c.encoder_dim;
  w.stages.resize(c.encoder_rates.size());
  for (size_t i = 0; i < c.encoder_rates.size(); ++i) {
    EncoderStage& s = w.stages[i];
    const std::string p = "encoder.block." + std::to_string(i + 1) + ".block.";
    s.stride = c.encoder_rates[i];
    // Residual units at dilations 1, 3, 9 on the stage's input width, then the strided
    // convolution that doubles it.
    const int64_t dilations[3] = {1, 3, 9};
    s.units.resize(3);
    for (size_t u = 0; u < 3; ++u) {
      ResidualUnit& r = s.units[u];
      const std::string q = p + std::to_string(u) + ".block.";
      r.dilation = dilations[u];
      v.snake1d(q + "0", dim, r.alpha1);
      v.conv(ConvSpec{q + "1", {dim, dim, 7}, true, Bias::kRequired, 0.5}, r.conv1);
      v.snake1d(q + "2", dim, r.alpha2);
      v.conv(ConvSpec{q + "3", {dim, dim, 1}, true, Bias::kRequired, 0.5}, r.conv2);
    }
    v.snake1d(p + "3", dim, s.alpha);
    v.conv(ConvSpec{p + "4", {2 * dim, dim, 2 * s.stride}}, s.down);
    dim *= 2;
  }
  const std::string tail = "encoder.block.";
  v.snake1d(tail + std::to_string(c.encoder_rates.size() + 1), dim, w.alpha_out);
  v.conv(ConvSpec{tail + std::to_string(c.encoder_rates.size() + 2), {c.latent_dim, dim, 3}}, w.conv_out);

  // pre_block: latent_dim -> latent_channels.
  const int64_t in = c.latent_dim, out = c.latent_channels;
  v.layer_norm("pre_block.norm1", in, w.norm1);
  v.linear(LinearSpec{"pre_block.attn.qkv", 3 * in, in, /*bias=*/false}, w.qkv);
  v.vector("pre_block.attn.q_bias", in, w.q_bias);
  v.vector("pre_block.attn.v_bias", in, w.v_bias);
  v.unread("pre_block.attn.zero_k_bias", {in}, 0.0);
  v.linear(LinearSpec{"pre_block.attn.proj", out, out}, w.attn_proj);
  v.linear(LinearSpec{"pre_block.proj", out, in}, w.proj);
  v.layer_norm("pre_block.norm3", in, w.norm3);
  v.layer_norm("pre_block.norm2", out, w.norm2);
  v.layer_norm("pre_block.mlp.norm", out, w.mlp_norm);
  v.linear(LinearSpec{"pre_block.mlp.w0", 2 * out, out}, w.mlp_w0);
  v.linear(LinearSpec{"pre_block.mlp.w1", 2 * out, out}, w.mlp_w1);
  v.linear(LinearSpec{"pre_block.mlp.w2", out, 2 * out}, w.mlp_w2);

  // The posterior: H3 conditions on its mean; the log-std head is stored, never evaluated.
  v.conv(
      ConvSpec{"mean_proj", {out, out, 1}, false, Bias::kRequired, 1.0 / std::sqrt(static_cast<double>(out))},
      w.mean_proj);
  v.unread("logs_proj.weight", {out, out, 1}, 0.1);
  v.unread("logs_proj.bias", {out}, 0.02);
}

}  // namespace h3::audio
