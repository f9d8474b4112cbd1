#include "audio/audio_encoder.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <map>

#include "audio/encoder_modules.h"
#include "common/shape.h"
#include "h3/error.h"
#include "io/checkpoint.h"

namespace h3::audio {
namespace {

// DAC's Snake: x + 1/(alpha + 1e-9) · sin²(alpha·x), alpha [1, C, 1].
at::Tensor snake(const at::Tensor& x, const at::Tensor& alpha) {
  return x + (alpha + 1e-9).reciprocal() * at::sin(alpha * x).pow(2);
}

at::Tensor conv(const at::Tensor& x, const Conv& c, int64_t stride, int64_t padding, int64_t dilation = 1) {
  return at::conv1d(x, c.weight, c.bias, stride, padding, dilation);
}

at::Tensor residual_unit(const at::Tensor& x, const ResidualUnit& r) {
  at::Tensor y = conv(snake(x, r.alpha1), r.conv1, 1, 3 * r.dilation, r.dilation);
  y = conv(snake(y, r.alpha2), r.conv2, 1, 0);
  // "Same" padding keeps the length; the reference crops the shortcut's centre when it does not.
  const int64_t crop = (x.size(2) - y.size(2)) / 2;
  return (crop > 0 ? x.slice(2, crop, x.size(2) - crop) : x) + y;
}

at::Tensor layer_norm(const at::Tensor& x, const LayerNormWeights& n) {
  return at::layer_norm(x, {x.size(-1)}, n.weight, n.bias, 1e-5);
}

at::Tensor linear(const at::Tensor& x, const Linear& l) {
  return at::linear(x, l.weight, l.bias);
}

// pre_block on [B, T, latent_dim] -> [B, T, latent_channels].
at::Tensor pre_block(const at::Tensor& x, const EncoderWeights& w, const AudioVaeConfig& c) {
  const int64_t batch = x.size(0), frames = x.size(1), heads = c.num_attention_heads;
  const int64_t head_dim = c.latent_dim / heads;
  const at::Tensor n1 = layer_norm(x, w.norm1);
  const at::Tensor bias = at::cat({w.q_bias, at::zeros_like(w.q_bias), w.v_bias});
  const at::Tensor qkv = at::linear(n1, w.qkv.weight, bias).reshape({batch, frames, 3, heads, head_dim});
  // [B, H, T, D] each; causal: a latent attends to itself and what came before.
  auto part = [&](int64_t i) { return qkv.select(2, i).transpose(1, 2); };
  at::Tensor a = at::scaled_dot_product_attention(part(0), part(1), part(2), {}, 0.0, /*is_causal=*/true);
  // The heads are averaged away, and the head width is pooled down to the latent width.
  a = a.mean(1);  // [B, T, D]
  a = at::adaptive_avg_pool1d(a, {c.latent_channels});
  at::Tensor h = linear(layer_norm(x, w.norm3), w.proj) + linear(a, w.attn_proj);
  const at::Tensor m = layer_norm(layer_norm(h, w.norm2), w.mlp_norm);
  return h + linear(at::gelu(linear(m, w.mlp_w0), "tanh") * linear(m, w.mlp_w1), w.mlp_w2);
}

}  // namespace

EncoderWeights bind_encoder_weights(const AudioVaeConfig& c, const std::string& origin,
                                    const std::function<at::Tensor(const std::string&)>& fetch) {
  const Binder b(origin, fetch);
  EncoderWeights w;
  const auto stats = [&](const std::vector<double>& v) {
    return at::tensor(v, at::TensorOptions().dtype(at::kDouble))
        .to(at::kFloat)
        .view({1, 1, c.latent_channels});
  };
  w.latents_mean = stats(c.latents_mean);
  w.latents_std = stats(c.latents_std);
  declare_encoder_modules(c, w, b);
  return w;
}

std::vector<std::pair<std::string, at::Tensor>> random_encoder_checkpoint(const AudioVaeConfig& c,
                                                                          uint64_t seed) {
  RandomWriter w{at::detail::createCPUGenerator(seed), at::Tensor(), {}};
  EncoderWeights slots;  // unused: the writer needs the declaration's names and shapes only
  declare_encoder_modules(c, slots, w);
  return std::move(w.out);
}

namespace {

// Counts what a declaration's modules hold, by the shapes it names.
struct ParameterCounter {
  int64_t n = 0;
  static int64_t numel(const std::vector<int64_t>& shape) {
    int64_t k = 1;
    for (int64_t d : shape) k *= d;
    return k;
  }
  void conv(const ConvSpec& s, Conv&) {
    n += numel(s.shape) + (s.bias == ConvSpec::Bias::kNone ? 0 : s.out_channels()) +
         (s.weight_normed ? s.shape[0] : 0);
  }
  void snake1d(const std::string&, int64_t channels, at::Tensor&) { n += channels; }
  void linear(const LinearSpec& s, Linear&) { n += s.out * s.in + (s.bias ? s.out : 0); }
  void layer_norm(const std::string&, int64_t channels, LayerNormWeights&) { n += 2 * channels; }
  void vector(const std::string&, int64_t k, at::Tensor&) { n += k; }
  void unread(const std::string&, const std::vector<int64_t>& shape, double) { n += numel(shape); }
};

}  // namespace

int64_t encoder_parameters(const AudioVaeConfig& c) {
  ParameterCounter counter;
  EncoderWeights slots;
  declare_encoder_modules(c, slots, counter);
  return counter.n;
}

namespace {

// Moves every declared tensor of a copy of the weights (the walk binding and counting take).
struct DeviceMover {
  c10::Device device;
  void move(at::Tensor& t) const {
    if (t.defined()) t = t.to(device);
  }
  void conv(const ConvSpec&, Conv& c) const {
    move(c.weight);
    move(c.bias);
  }
  void snake1d(const std::string&, int64_t, at::Tensor& alpha) const { move(alpha); }
  void linear(const LinearSpec&, Linear& l) const {
    move(l.weight);
    move(l.bias);
  }
  void layer_norm(const std::string&, int64_t, LayerNormWeights& n) const {
    move(n.weight);
    move(n.bias);
  }
  void vector(const std::string&, int64_t, at::Tensor& t) const { move(t); }
  void unread(const std::string&, const std::vector<int64_t>&, double) const {}
};

}  // namespace

AudioEncoder AudioEncoder::to(const c10::Device& device) const {
  EncoderWeights moved = weights_;
  const DeviceMover mover{device};
  mover.move(moved.latents_mean);
  mover.move(moved.latents_std);
  declare_encoder_modules(config_, moved, mover);
  return AudioEncoder(config_, std::move(moved));
}

AudioEncoder::AudioEncoder(AudioVaeConfig config, EncoderWeights weights)
    : config_(std::move(config)), weights_(std::move(weights)) {}

AudioEncoder AudioEncoder::load(const std::filesystem::path& audio_vae_dir) {
  const OpenedAudioVae vae = open_audio_vae(audio_vae_dir);
  const io::Checkpoint& ckpt = vae.checkpoint;
  if (!ckpt.find("encoder.block.0.weight_g") && !ckpt.find("encoder.block.0.weight") &&
      !ckpt.find("encoder.block.0.parametrizations.weight.original0")) {
    throw Error(ErrorKind::kNotFound,
                ckpt.path() +
                    ": this audio VAE holds no encoder (no 'encoder.block.0' tensors): audio references and "
                    "video soundtracks need the full audio_vae/ of the release, not a decode-only export");
  }
  return AudioEncoder(vae.config, bind_encoder_weights(vae.config, ckpt.path(), fetch_from(ckpt)));
}

AudioEncoder AudioEncoder::random(const AudioVaeConfig& config, uint64_t seed) {
  config.validate("random audio VAE config");
  return AudioEncoder(config, bind_encoder_weights(config, "random audio VAE weights",
                                                   fetch_from(random_encoder_checkpoint(config, seed))));
}

at::Tensor AudioEncoder::posterior_mean(const at::Tensor& mono) const {
  if (!mono.defined() || mono.dim() != 3 || mono.size(1) != 1 || mono.size(2) < 1 ||
      !mono.is_floating_point()) {
    throw Error(ErrorKind::kInvalidArgument,
                "audio encode: expected mono waveforms [B, 1, N >= 1] (floating), got " +
                    (mono.defined() ? shape_string(mono.sizes()) : std::string("none")));
  }
  const EncoderWeights& w = weights_;
  const int64_t hop = config_.hop(), n = mono.size(2);
  const int64_t padded = latents_for(n) * hop;
  at::Tensor x = mono.to(device(), at::kFloat);
  if (padded > n) x = at::constant_pad_nd(x, {0, padded - n}, 0.0);
  x = conv(x, w.conv_in, 1, 3);
  for (const EncoderStage& s : w.stages) {
    for (const ResidualUnit& r : s.units) x = residual_unit(x, r);
    x = conv(snake(x, s.alpha), s.down, s.stride, (s.stride + 1) / 2);
  }
  x = conv(snake(x, w.alpha_out), w.conv_out, 1, 1);  // [B, latent_dim, A]
  x = pre_block(x.transpose(1, 2), w, config_).transpose(1, 2);
  return at::conv1d(x, w.mean_proj.weight, w.mean_proj.bias);
}

at::Tensor AudioEncoder::encode(const at::Tensor& stereo) const {
  if (!stereo.defined() || stereo.dim() != 2 || stereo.size(0) != 2 || stereo.size(1) < 1) {
    throw Error(ErrorKind::kInvalidArgument,
                "audio encode: expected a stereo waveform [2, N >= 1], got " +
                    (stereo.defined() ? shape_string(stereo.sizes()) : std::string("none")));
  }
  const at::Tensor z = posterior_mean(stereo.unsqueeze(1)).transpose(1, 2);  // [2, A, C]
  return ((z - weights_.latents_mean) / weights_.latents_std)
      .reshape({-1, config_.latent_channels})
      .to(at::kCPU)
      .contiguous();
}

}  // namespace h3::audio
