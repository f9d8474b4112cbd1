#include "audio/audio_decoder.h"

#include <ATen/ATen.h>

#include <map>

#include "audio/weight_visitors.h"
#include "h3/error.h"
#include "io/checkpoint.h"

namespace h3::audio {
namespace {

Conv conv_to(const Conv& c, const c10::Device& d) {
  return Conv{c.weight.to(d), c.bias.defined() ? c.bias.to(d) : at::Tensor()};
}

AntiAliasedSnake act_to(const AntiAliasedSnake& a, const c10::Device& d) {
  return AntiAliasedSnake{a.alpha.to(d), a.inv_beta.to(d), a.up_filter.to(d), a.down_filter.to(d),
                          a.up_polyphase.to(d)};
}

std::string shape_str(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

AudioDecoder::AudioDecoder(AudioVaeConfig config, DecoderWeights weights)
    : config_(std::move(config)), weights_(std::move(weights)), context_latents_(config_.context_latents()) {}

AudioDecoder AudioDecoder::load(const std::filesystem::path& audio_vae_dir) {
  const OpenedAudioVae vae = open_audio_vae(audio_vae_dir);
  const io::Checkpoint& ckpt = vae.checkpoint;
  // Only the decode path is read; the encoder, the latent projections and pre_block stay unread.
  return AudioDecoder(vae.config, bind_decoder_weights(vae.config, ckpt.path(), fetch_from(ckpt)));
}

AudioDecoder AudioDecoder::random(const AudioVaeConfig& config, uint64_t seed) {
  config.validate("random audio VAE config");
  return AudioDecoder(config, bind_decoder_weights(config, "random audio VAE weights",
                                                   fetch_from(random_checkpoint(config, seed))));
}

AudioDecoder AudioDecoder::to(const c10::Device& device) const {
  DecoderWeights w;
  w.latents_mean = weights_.latents_mean.to(device);
  w.latents_std = weights_.latents_std.to(device);
  w.dec_in_proj = conv_to(weights_.dec_in_proj, device);
  w.conv_pre = conv_to(weights_.conv_pre, device);
  for (const Conv& c : weights_.ups) w.ups.push_back(conv_to(c, device));
  for (const AmpBlock& b : weights_.resblocks) {
    AmpBlock nb{b.kernel, b.dilations, {}, {}, {}};
    for (const Conv& c : b.convs1) nb.convs1.push_back(conv_to(c, device));
    for (const Conv& c : b.convs2) nb.convs2.push_back(conv_to(c, device));
    for (const AntiAliasedSnake& a : b.activations) nb.activations.push_back(act_to(a, device));
    w.resblocks.push_back(std::move(nb));
  }
  w.activation_post = act_to(weights_.activation_post, device);
  w.conv_post = conv_to(weights_.conv_post, device);
  return AudioDecoder(config_, std::move(w));
}

c10::Device AudioDecoder::device() const {
  return weights_.conv_pre.weight.device();
}

namespace {

// rows [2·A, C] -> normalised latents [2, C, A] (left channel's rows first), fp32 on `device`.
at::Tensor rows_to_latents(const at::Tensor& rows, int64_t channels, const c10::Device& device) {
  if (!rows.defined() || rows.dim() != 2 || rows.size(1) != channels || rows.size(0) % 2 != 0 ||
      rows.size(0) == 0) {
    throw Error(ErrorKind::kInvalidArgument,
                "audio rows: expected the DiT's audio rows [2·A, " + std::to_string(channels) +
                    "] (A >= 1 latents per channel, left channel's rows first), got " +
                    (rows.defined() ? shape_str(rows.sizes()) : std::string("no tensor")));
  }
  if (!rows.is_floating_point()) {
    throw Error(ErrorKind::kInvalidArgument, "audio rows: expected a floating-point tensor, got " +
                                                 std::string(c10::toString(rows.scalar_type())));
  }
  const int64_t a = rows.size(0) / 2;
  return rows.to(device, at::kFloat).reshape({2, a, channels}).permute({0, 2, 1});
}

}  // namespace

at::Tensor AudioDecoder::decode(const at::Tensor& rows) const {
  return decode_range(rows, 0, rows.defined() && rows.dim() == 2 ? rows.size(0) / 2 : 1);
}

at::Tensor AudioDecoder::decode_range(const at::Tensor& rows, int64_t begin, int64_t end) const {
  const at::Tensor z = rows_to_latents(rows, config_.latent_channels, device());
  const int64_t a = z.size(2);
  if (begin < 0 || end > a || begin >= end) {
    throw Error(ErrorKind::kInvalidArgument, "audio decode range [" + std::to_string(begin) + ", " +
                                                 std::to_string(end) + ") is not a non-empty range of the " +
                                                 std::to_string(a) + " audio latents");
  }
  const int64_t lo = std::max<int64_t>(0, begin - context_latents_);
  const int64_t hi = std::min(a, end + context_latents_);
  const at::Tensor piece = z.slice(2, lo, hi) * weights_.latents_std + weights_.latents_mean;
  const at::Tensor wave = run_decoder(weights_, config_, piece);  // [2, 1, hop·(hi-lo)]
  const int64_t hop = config_.hop();
  return wave.reshape({2, -1}).slice(1, (begin - lo) * hop, (end - lo) * hop).to(at::kCPU).contiguous();
}

}  // namespace h3::audio
