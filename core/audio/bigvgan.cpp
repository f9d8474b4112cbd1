#include "audio/bigvgan.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "audio/decoder_modules.h"
#include "audio/weight_visitors.h"
#include "h3/error.h"

namespace h3::audio {
DecoderWeights bind_decoder_weights(const AudioVaeConfig& c, const std::string& origin,
                                    const std::function<at::Tensor(const std::string&)>& fetch) {
  const Binder b(origin, fetch);
  DecoderWeights w;
  const auto stats = [&](const std::vector<double>& v) {
    return at::tensor(v, at::TensorOptions().dtype(at::kDouble))
        .to(at::kFloat)
        .view({1, c.latent_channels, 1});
  };
  w.latents_mean = stats(c.latents_mean);
  w.latents_std = stats(c.latents_std);
  declare_decoder_modules(c, w, b);
  return w;
}

at::Tensor kaiser_sinc_filter(int64_t taps) {
  // BigVGAN's 2x resampling filter: cutoff 0.5/2, half width 0.6/2, Kaiser beta from the
  // attenuation formula; even taps sit at half-integer times. Computed in fp32 as the
  // reference does, normalised to unit sum.
  const double cutoff = 0.25, half_width = 0.3;
  const int64_t half = taps / 2;
  const double attenuation = 2.285 * static_cast<double>(half - 1) * M_PI * 4.0 * half_width + 7.95;
  double beta = 0.0;
  if (attenuation > 50.0) {
    beta = 0.1102 * (attenuation - 8.7);
  } else if (attenuation >= 21.0) {
    beta = 0.5842 * std::pow(attenuation - 21.0, 0.4) + 0.07886 * (attenuation - 21.0);
  }
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor window = at::kaiser_window(taps, /*periodic=*/false, beta, f32);
  const at::Tensor time = taps % 2 == 0 ? at::arange(-half, half, at::TensorOptions().dtype(at::kLong)) + 0.5
                                        : at::arange(taps, at::TensorOptions().dtype(at::kLong)) - half;
  at::Tensor filter = 2 * cutoff * window * at::sinc(2 * cutoff * time.to(at::kFloat));
  filter = filter / filter.sum();
  return filter.view({1, 1, taps});
}

std::vector<std::pair<std::string, at::Tensor>> random_checkpoint(const AudioVaeConfig& c, uint64_t seed) {
  RandomWriter w{at::detail::createCPUGenerator(seed), kaiser_sinc_filter(c.anti_alias_taps), {}};
  DecoderWeights slots;  // unused: the writer needs the declaration's names and shapes only
  declare_decoder_modules(c, slots, w);
  return std::move(w.out);
}

namespace {

at::Tensor conv1d(const at::Tensor& x, const Conv& c, int64_t dilation = 1) {
  const int64_t k = c.weight.size(2);
  return at::conv1d(x, c.weight, c.bias, /*stride=*/1, /*padding=*/dilation * (k - 1) / 2, dilation);
}

// BigVGAN's Activation1d: 2x upsample (replicate pad, transposed filter ×2, crop), SnakeBeta,
// 2x lowpass downsample (replicate pad, strided filter). The reference filters each channel
// on its own (groups = channels) with one filter for all of them, so the channels are folded
// into the batch. The transposed filter runs in polyphase form: output 2n takes the even taps
// and output 2n+1 the odd ones, one two-channel convolution instead of LibTorch's slow
// single-channel transposed convolution (the same sums, in another order).
at::Tensor anti_aliased_snake(const at::Tensor& x, const AntiAliasedSnake& a) {
  const int64_t batch = x.size(0), channels = x.size(1), taps = a.up_filter.size(2);
  const int64_t pad = taps / 2 - 1;
  const int64_t crop_left = pad * 2 + (taps - 2) / 2, crop_right = pad * 2 + (taps - 2 + 1) / 2;
  at::Tensor up = at::replication_pad1d(x, {pad, pad}).reshape({batch * channels, 1, -1});
  // [N, 2, L + taps/2 - 1] -> interleaved [N, 2L + taps - 2], the transposed convolution's length.
  up = at::conv1d(up, a.up_polyphase, {}, /*stride=*/1, /*padding=*/taps / 2 - 1);
  up = 2 * up.transpose(1, 2).reshape({batch, channels, -1});
  up = up.slice(2, crop_left, up.size(2) - crop_right);
  const at::Tensor s = at::sin(up * a.alpha);
  up = up + a.inv_beta * (s * s);
  const int64_t down_left = taps / 2 - 1, down_right = taps / 2;
  up = at::replication_pad1d(up, {down_left, down_right}).reshape({batch * channels, 1, -1});
  return at::conv1d(up, a.down_filter, {}, /*stride=*/2).reshape({batch, channels, -1});
}

at::Tensor amp_block(at::Tensor x, const AmpBlock& b) {
  for (size_t n = 0; n < b.dilations.size(); ++n) {
    at::Tensor t = anti_aliased_snake(x, b.activations[2 * n]);
    t = conv1d(t, b.convs1[n], b.dilations[n]);
    t = anti_aliased_snake(t, b.activations[2 * n + 1]);
    t = conv1d(t, b.convs2[n]);
    x = t + x;
  }
  return x;
}

}  // namespace

at::Tensor run_decoder(const DecoderWeights& w, const AudioVaeConfig& c, const at::Tensor& z) {
  at::Tensor x = at::conv1d(z, w.dec_in_proj.weight, w.dec_in_proj.bias);
  x = conv1d(x, w.conv_pre);
  const size_t kernels = c.resblock_kernel_sizes.size();
  for (int64_t i = 0; i < c.num_stages(); ++i) {
    const Conv& up = w.ups[i];
    const int64_t rate = c.decoder_rates[i], k = up.weight.size(2);
    x = at::conv_transpose1d(x, up.weight, up.bias, rate, (k - rate) / 2);
    // The stage's output is the mean of its AMP blocks (resblocks [i·K, (i+1)·K), K kernel
    // sizes), each applied to the same input.
    const AmpBlock* blocks = &w.resblocks[static_cast<size_t>(i) * kernels];
    at::Tensor sum = amp_block(x, blocks[0]);
    for (size_t j = 1; j < kernels; ++j) sum = sum + amp_block(x, blocks[j]);
    x = sum / static_cast<double>(kernels);
  }
  x = anti_aliased_snake(x, w.activation_post);
  x = conv1d(x, w.conv_post);
  return at::clamp(x, -1.0, 1.0);
}

}  // namespace h3::audio
