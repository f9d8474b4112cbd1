// BigVGAN as the H3 audio VAE decodes with it: weights with weight norm already
// folded, and the forward pass (docs/audio.md).
//
// Names follow the checkpoint: `decoder.ups.<i>.0`, `decoder.resblocks.<3i+j>`
// (stage i, kernel j), each AMP block's `convs1.<n>` (dilated), `convs2.<n>` and
// `activations.<2n>` / `activations.<2n+1>` (before convs1.<n> / convs2.<n>).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "audio/config.h"

namespace h3::audio {

struct Conv {  // a Conv1d or ConvTranspose1d with its weight-norm folded weight
  at::Tensor weight;
  at::Tensor bias;  // undefined when the checkpoint has none (conv_post)
};

// SnakeBeta (log-scale parameters) between a 2x upsampling and a 2x lowpass downsampling.
struct AntiAliasedSnake {
  at::Tensor alpha;         // exp(act.alpha), [1, C, 1]
  at::Tensor inv_beta;      // 1 / (exp(act.beta) + 1e-9), [1, C, 1]
  at::Tensor up_filter;     // upsample.filter [1, 1, taps], shared by every channel
  at::Tensor down_filter;   // downsample.lowpass.filter [1, 1, taps]
  at::Tensor up_polyphase;  // up_filter's even and odd taps, reversed: [2, 1, taps / 2]
};

struct AmpBlock {
  int64_t kernel = 0;
  std::vector<int64_t> dilations;
  std::vector<Conv> convs1, convs2;
  std::vector<AntiAliasedSnake> activations;  // 2 per dilation
};

struct DecoderWeights {
  at::Tensor latents_mean;  // [1, C, 1] fp32
  at::Tensor latents_std;   // [1, C, 1] fp32
  Conv dec_in_proj;         // plain (not weight-normed) 1x1 conv
  Conv conv_pre;
  std::vector<Conv> ups;            // one per stage
  std::vector<AmpBlock> resblocks;  // stages x kernels
  AntiAliasedSnake activation_post;
  Conv conv_post;
};

// Reads a decoder's weights by checkpoint name: `fetch(name)` returns the stored tensor or an
// undefined tensor when the checkpoint has none. Folds weight norm (either spelling), checks
// every shape against `c` and throws h3::Error (kNotFound / kMismatch) naming `origin` and the
// tensor.
DecoderWeights bind_decoder_weights(const AudioVaeConfig& c, const std::string& origin,
                                    const std::function<at::Tensor(const std::string&)>& fetch);

// The stored (unfolded) checkpoint of a decoder with seeded random weights, in the diffusers
// spelling (weight_g / weight_v) and with the real anti-aliasing filters: what make-tiny
// writes, and what bind_decoder_weights reads back.
std::vector<std::pair<std::string, at::Tensor>> random_checkpoint(const AudioVaeConfig& c, uint64_t seed);

// The fixed Kaiser-windowed sinc lowpass of BigVGAN's 2x resampling (cutoff 0.25, half
// width 0.3), [1, 1, taps].
at::Tensor kaiser_sinc_filter(int64_t taps);

// Denormalised latents [B, latent_channels, n] -> clamped waveform [B, 1, hop·n].
at::Tensor run_decoder(const DecoderWeights& w, const AudioVaeConfig& c, const at::Tensor& z);

}  // namespace h3::audio
