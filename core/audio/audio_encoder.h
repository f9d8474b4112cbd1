// The H3 audio VAE encode: a waveform to the DiT's audio rows, what a Ref2VA audio reference or
// a video reference's soundtrack conditions on (docs/audio.md; docs/conditioning.md).
//
// stereo waveform [2, N] at the VAE's rate -> right-padded with zeros to a whole hop -> the two
// channels as a batch of two mono signals -> DAC's encoder (Snake, weight-normed dilated and
// strided convolutions; hop 800 in the release) -> pre_block (causal self-attention whose heads
// are mean-pooled and adaptively pooled down to the latent width, beside a linear projection,
// then a GeGLU MLP) -> mean_proj: the posterior mean, which H3 takes (never a sample) ->
// (z - mean) / std per channel -> rows [2·A, C], the left channel's A rows first.
//
// Weight norm is folded once at load. fp32, on the CPU unless moved with to() (beside the GPU
// decode with device = cuda).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "audio/bigvgan.h"
#include "audio/config.h"
#include "audio/weight_visitors.h"

namespace h3::audio {

struct ResidualUnit {  // Snake, dilated conv (k 7), Snake, conv (k 1), plus the input
  at::Tensor alpha1;
  Conv conv1;
  int64_t dilation = 1;
  at::Tensor alpha2;
  Conv conv2;
};

struct EncoderStage {  // three residual units, a Snake, a strided conv doubling the width
  std::vector<ResidualUnit> units;
  at::Tensor alpha;
  Conv down;
  int64_t stride = 1;
};

struct EncoderWeights {
  at::Tensor latents_mean;  // [1, 1, C] fp32
  at::Tensor latents_std;   // [1, 1, C] fp32
  Conv conv_in;
  std::vector<EncoderStage> stages;
  at::Tensor alpha_out;
  Conv conv_out;
  LayerNormWeights norm1, norm2, norm3;
  Linear qkv;  // no bias: the query and value biases are their own tensors, the key's is zero
  at::Tensor q_bias, v_bias;
  Linear attn_proj, proj;
  LayerNormWeights mlp_norm;
  Linear mlp_w0, mlp_w1, mlp_w2;
  Conv mean_proj;
};

// Reads an encoder's weights by checkpoint name (fetch returns an undefined tensor for a name
// the checkpoint lacks); throws h3::Error naming `origin` and the tensor.
EncoderWeights bind_encoder_weights(const AudioVaeConfig& c, const std::string& origin,
                                    const std::function<at::Tensor(const std::string&)>& fetch);

// The stored checkpoint of an encoder with seeded random weights (weight_g / weight_v spelling,
// the unread log-std head and zero key bias included): what make-tiny writes beside the decoder.
std::vector<std::pair<std::string, at::Tensor>> random_encoder_checkpoint(const AudioVaeConfig& c,
                                                                          uint64_t seed);

// The encoder's parameters as a checkpoint stores them (the declaration walked, nothing allocated):
// 86.4 M at the release's sizes.
int64_t encoder_parameters(const AudioVaeConfig& c);

class AudioEncoder {
 public:
  AudioEncoder(AudioVaeConfig config, EncoderWeights weights);

  // Loads the encoder of an audio VAE folder (either layout, as AudioDecoder::load). Throws
  // h3::Error naming the file or tensor; a checkpoint without the encoder's tensors (a
  // decode-only export) is named so.
  static AudioEncoder load(const std::filesystem::path& audio_vae_dir);
  // Seeded random weights of `config`'s shapes (benchmarks).
  static AudioEncoder random(const AudioVaeConfig& config, uint64_t seed);

  const AudioVaeConfig& config() const { return config_; }
  const EncoderWeights& weights() const { return weights_; }
  // The same encoder with its weights on `device`; waveforms may live anywhere.
  AudioEncoder to(const c10::Device& device) const;
  c10::Device device() const { return weights_.conv_in.weight.device(); }
  int sample_rate() const { return static_cast<int>(config_.sample_rate); }
  int64_t samples_per_latent() const { return config_.hop(); }
  // Latents per channel of `samples` samples: ceil(samples / hop).
  int64_t latents_for(int64_t samples) const { return (samples + config_.hop() - 1) / config_.hop(); }

  // stereo: [2, N] (N >= 1) floating, at sample_rate() -> normalised rows [2·A, C] fp32 CPU,
  // A = latents_for(N), the left channel's rows first (on the CPU whatever the device).
  at::Tensor encode(const at::Tensor& stereo) const;
  // The posterior mean before normalisation, [B, C, A] for mono signals [B, 1, N]: what the
  // reference's encode(...).latent_dist.mode() gives (parity tests), on the encoder's device.
  at::Tensor posterior_mean(const at::Tensor& mono) const;

 private:
  AudioVaeConfig config_;
  EncoderWeights weights_;
};

}  // namespace h3::audio
