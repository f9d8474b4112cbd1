// The audio VAE decoder's modules, declared once, in checkpoint order: for each convolution its
// checkpoint prefix, shape, whether it is weight-normed, its bias and the scale seeded random
// weights give it; for each anti-aliased SnakeBeta its prefix and channels. Binding a checkpoint
// (bind_decoder_weights) and writing random weights (random_checkpoint) both follow from
// declare_decoder_modules(); the struct it fills is DecoderWeights (audio/bigvgan.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "audio/bigvgan.h"
#include "audio/config.h"

namespace h3::audio {

struct ConvSpec {
  std::string prefix;          // checkpoint prefix: <prefix>.weight_g / .weight_v / .weight / .bias
  std::vector<int64_t> shape;  // the weight's shape ([in, out, k] for a transposed convolution)
  bool weight_normed = true;   // stored as a weight-norm pair (either spelling); dec_in_proj is plain
  enum class Bias { kNone, kRequired, kOptional } bias = Bias::kRequired;
  // Random weights: a weight-normed conv's row norm, a plain conv's weight std (chosen so that a
  // signal keeps about its scale through the random decoder).
  double random_scale = 1.0;
  bool transposed = false;  // a ConvTranspose1d: its bias has shape[1] (out) entries

  int64_t out_channels() const { return transposed ? shape[1] : shape[0]; }
};

struct SnakeSpec {
  std::string prefix;  // <prefix>.act.alpha / .act.beta / .upsample.filter / .downsample.lowpass.filter
  int64_t channels = 0;
  int64_t taps = 0;  // anti-aliasing filter taps
};

// Sizes `w` for `c` (stages, AMP blocks, their dilations), then calls v.conv(spec, Conv&) and
// v.snake(spec, AntiAliasedSnake&) for every module in checkpoint order: dec_in_proj, conv_pre,
// then per stage i its upsampling `decoder.ups.<i>.0` and AMP blocks `decoder.resblocks.<K·i+j>`
// (K kernel sizes; each block's convs1.<n>, then convs2.<n>, then activations.<2n>, <2n+1>:
// before convs1.<n> and convs2.<n>), then activation_post and conv_post.
template <typename Visitor>
void declare_decoder_modules(const AudioVaeConfig& c, DecoderWeights& w, Visitor&& v) {
  using Bias = ConvSpec::Bias;
  v.conv(ConvSpec{"dec_in_proj",
                  {c.latent_dim, c.latent_channels, 1},
                  false,
                  Bias::kRequired,
                  1.0 / std::sqrt(static_cast<double>(c.latent_channels))},
         w.dec_in_proj);
  v.conv(ConvSpec{"decoder.conv_pre", {c.decoder_dim, c.latent_dim, c.conv_pre_kernel}}, w.conv_pre);
  const int64_t kernels = static_cast<int64_t>(c.resblock_kernel_sizes.size());
  w.ups.resize(static_cast<size_t>(c.num_stages()));
  w.resblocks.resize(static_cast<size_t>(c.num_stages() * kernels));
  for (int64_t i = 0; i < c.num_stages(); ++i) {
    const int64_t in = c.decoder_dim >> i, out = c.stage_channels(i);
    // Weight norm of a transposed convolution runs over its input channel; each input spreads
    // over out·k taps, and a gain of sqrt(rate·out/in) keeps the upsampled signal's scale.
    v.conv(ConvSpec{"decoder.ups." + std::to_string(i) + ".0",
                    {in, out, c.decoder_kernel_sizes[static_cast<size_t>(i)]},
                    true,
                    Bias::kRequired,
                    std::sqrt(static_cast<double>(c.decoder_rates[static_cast<size_t>(i)]) * out / in),
                    /*transposed=*/true},
           w.ups[static_cast<size_t>(i)]);
    for (int64_t j = 0; j < kernels; ++j) {
      AmpBlock& blk = w.resblocks[static_cast<size_t>(i * kernels + j)];
      const std::string p = "decoder.resblocks." + std::to_string(i * kernels + j);
      blk.kernel = c.resblock_kernel_sizes[static_cast<size_t>(j)];
      blk.dilations = c.resblock_dilation_sizes[static_cast<size_t>(j)];
      const size_t n = blk.dilations.size();
      blk.convs1.resize(n);
      blk.convs2.resize(n);
      blk.activations.resize(2 * n);
      for (size_t d = 0; d < n; ++d)
        v.conv(
            ConvSpec{p + ".convs1." + std::to_string(d), {out, out, blk.kernel}, true, Bias::kRequired, 0.5},
            blk.convs1[d]);
      for (size_t d = 0; d < n; ++d)
        v.conv(
            ConvSpec{p + ".convs2." + std::to_string(d), {out, out, blk.kernel}, true, Bias::kRequired, 0.5},
            blk.convs2[d]);
      for (size_t a = 0; a < 2 * n; ++a)
        v.snake(SnakeSpec{p + ".activations." + std::to_string(a), out, c.anti_alias_taps},
                blk.activations[a]);
    }
  }
  const int64_t last = c.stage_channels(c.num_stages() - 1);
  v.snake(SnakeSpec{"decoder.activation_post", last, c.anti_alias_taps}, w.activation_post);
  // No bias in H3 (BigVGAN's use_bias_at_final off); a checkpoint that has one is read.
  v.conv(ConvSpec{"decoder.conv_post", {1, last, c.conv_post_kernel}, true, Bias::kOptional, 0.15},
         w.conv_post);
}

}  // namespace h3::audio
