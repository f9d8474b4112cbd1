// The H3 audio VAE decode: the DiT's audio rows to a stereo 32 kHz waveform
// (docs/audio.md; docs/h3-model.md §9).
//
// rows [2·A, 32] (left channel's A rows first) -> [2, 32, A] -> z·std + mean ->
// dec_in_proj (1x1 conv) -> BigVGAN (conv_pre, upsampling by the decoder rates
// with AMP resblocks of anti-aliased SnakeBeta activations, activation_post,
// conv_post) -> clamp to [-1, 1] -> [2, hop·A]. The two channels are decoded as a
// batch of two, as the reference does.
//
// Weight norm is folded once at load: the decoder holds plain convolution
// weights. Everything runs in fp32 on the device the weights live on.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <filesystem>

#include "audio/bigvgan.h"
#include "audio/config.h"

namespace h3::audio {

class AudioDecoder {
 public:
  AudioDecoder(AudioVaeConfig config, DecoderWeights weights);

  // Loads an audio VAE folder: the release's native layout (config.json naming config.yaml,
  // metadata.json and model.safetensors) or the diffusers layout (config.json +
  // diffusion_pytorch_model.safetensors). Weight-normed convolutions may be spelled
  // weight_g/weight_v or parametrizations.weight.original0/original1. Throws h3::Error (a
  // std::runtime_error) naming the file or tensor and saying what to do.
  static AudioDecoder load(const std::filesystem::path& audio_vae_dir);

  // Seeded random weights of `config`'s shapes (tiny models, benchmarks); the anti-aliasing
  // filters are the real fixed ones.
  static AudioDecoder random(const AudioVaeConfig& config, uint64_t seed);

  // The same decoder with its weights on `device`.
  AudioDecoder to(const c10::Device& device) const;
  c10::Device device() const;

  const AudioVaeConfig& config() const { return config_; }
  const DecoderWeights& weights() const { return weights_; }
  int sample_rate() const { return static_cast<int>(config_.sample_rate); }
  int64_t samples_per_latent() const { return config_.hop(); }  // 800
  // Latents of context each side of a piece's boundary for decode_range to be exact: the
  // decoder's reach (22,893 samples in the release) in whole latents (29).
  int64_t context_latents() const { return context_latents_; }

  // rows: the DiT's audio rows [2·A, latent_channels], any floating dtype, any device ->
  // waveform fp32 [2, hop·A] in [-1, 1] on the CPU, left channel first.
  at::Tensor decode(const at::Tensor& rows) const;

  // Samples [hop·begin, hop·end) of decode(rows), equal within fp32 rounding: decodes the
  // latents [begin - context, end + context) clipped to [0, A) and trims.
  // 0 <= begin < end <= A.
  at::Tensor decode_range(const at::Tensor& rows, int64_t begin, int64_t end) const;

 private:
  AudioVaeConfig config_;
  DecoderWeights weights_;
  int64_t context_latents_ = 0;
};

enum class WavFormat { kFloat32, kPcm16 };

// Writes a [2, N] (or [C, N]) waveform as a RIFF WAVE file, channels interleaved:
// IEEE float 32 (format 3, with a fact chunk) or PCM 16-bit (values clamped to [-1, 1],
// scaled by 32767 and rounded). Throws h3::Error naming the file when it cannot be written.
void write_wav(const std::filesystem::path& path, const at::Tensor& waveform, int sample_rate,
               WavFormat format = WavFormat::kFloat32);

}  // namespace h3::audio
