// The H3 video VAE encoder (docs/h3-model.md §7.6, docs/vae.md "Encoder"): RGB frames to the
// normalised latents the DiT conditions on (FL2VA keyframes, Ref2VA references).
//
// Causal 3D CNN: conv_in, levels of ResNet blocks (per-frame GroupNorm, SiLU, 3x3x3 convs with
// reflect spatial and causal zero temporal padding) and strided downsamplers, GroupNorm + SiLU,
// conv_out -> mean | logvar, quant_conv. A single frame is encoded alone; a video per
// `clip_length` frames (the last frame repeated up to whole clips) with the last `token_drop`
// latents dropped. Each clip is cut into the decoder's 256-px tiles (min overlap 64 px), encoded
// tile by tile and blended in latent space, as released (tiling on).
//
// The conditioning recipe is diffusers' `encode_vae_condition`: the posterior is *sampled* from
// a fresh CPU generator seeded with 42, the sample rounded to float16, then normalised
// (z - latents_mean) / latents_std — the inverse of the decoder's z * std + mean.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>

#include "vae/config.h"
#include "vae/encoder_tensors.h"

namespace h3::dist {
class Group;
}

namespace h3::vae {

struct EncodeOptions {
  bool sample = true;          // posterior sample, as released; false: the posterior mean
  uint64_t seed = 42;          // seed of the fresh CPU generator the sample is drawn from
  bool round_fp16 = true;      // round the latent to float16 before normalising (diffusers' recipe)
  std::optional<bool> tiling;  // spatial tiling; default: the config's (on in the release)
};

class VideoEncoder {
 public:
  VideoEncoder(VaeConfig config, EncoderWeights weights);

  // Loads a VAE folder, diffusers (vae/) or native (video_vae/), through h3::io::Weights; reads
  // only the encoder and quant_conv tensors. kNotFound when the checkpoint has no encoder.
  static VideoEncoder load(const std::string& vae_dir);

  const VaeConfig& config() const { return config_; }
  const EncoderWeights& weights() const { return weights_; }

  // The same encoder with its weights on `device` (a CUDA device beside the GPU decode). Pixels
  // may live anywhere and are moved there; latents and moments come back on that device. The
  // posterior sample's noise is still drawn by a CPU generator, so a device changes no draw.
  VideoEncoder to(const c10::Device& device) const;
  c10::Device device() const { return weights_.conv_in_weight.device(); }

  // Pixels are RGB, channels first: an image [3, H, W], a video [3, T, H, W]; uint8 (0..255) or
  // floating point in [0, 1] — the range of the decoder's frames / frames_f32 (whose
  // [T, H, W, 3] layout is frames.permute({3, 0, 1, 2})). ImageNet normalisation is done here.
  // H and W must be multiples of the spatial ratio (16) and at least two latents (32 px).

  // Normalised conditioning latents [1, C, 1, H/16, W/16] of one image.
  at::Tensor encode_image(const at::Tensor& image, const EncodeOptions& opts = {}) const;
  // Normalised latents [1, C, t, H/16, W/16] of a video, t = latent_frames(T) (T = 1: the image path).
  at::Tensor encode_clip(const at::Tensor& frames, const EncodeOptions& opts = {}) const;

  // The posterior parameters [1, 2C, t, h, w] (mean | logvar; quant_conv output, clips joined,
  // token_drop latents dropped) of [3, T, H, W] pixels; the steps of encode_clip one by one.
  at::Tensor moments(const at::Tensor& frames, std::optional<bool> tiling = {}) const;
  // mean + exp(0.5 * clamp(logvar, -30, 20)) * randn(mean's shape, CPU generator seeded `seed`),
  // on the moments' device.
  static at::Tensor sample_posterior(const at::Tensor& moments, uint64_t seed);
  // (z - latents_mean) / latents_std per channel, in fp32 (z: [1, C, t, h, w]).
  at::Tensor normalize(const at::Tensor& z) const;

  // The same, collective over `g` (every rank passes the same pixels and gets the whole result):
  // as with the decoder, rank r encodes tiles r, r + P, ... of each clip and the tiles are
  // gathered; a clip with fewer tiles than ranks is encoded whole on every rank. Bit-identical
  // to the single-rank call. A bad input fails every rank together.
  at::Tensor encode_image(const at::Tensor& image, dist::Group& g, const EncodeOptions& opts = {}) const;
  at::Tensor encode_clip(const at::Tensor& frames, dist::Group& g, const EncodeOptions& opts = {}) const;
  at::Tensor moments(const at::Tensor& frames, dist::Group& g, std::optional<bool> tiling = {}) const;

  // Latent frames for T pixel frames: 1 for T = 1, else ceil(T / 17) * 5 - 3 (release).
  int64_t latent_frames(int64_t frames) const;

 private:
  at::Tensor encode(const at::Tensor& frames, const EncodeOptions& opts, const char* what,
                    dist::Group* g) const;
  at::Tensor moments_checked(const at::Tensor& frames, std::optional<bool> tiling, const char* what,
                             dist::Group* g) const;
  at::Tensor pixels_checked(const at::Tensor& frames,
                            const char* what) const;  // -> normalised [1, 3, T, H, W]
  // One clip of normalised pixels; tiles spread over `g` when given.
  at::Tensor encode_clip_tiles(const at::Tensor& x, bool tiling, dist::Group* g) const;
  at::Tensor encode_tile(const at::Tensor& x) const;  // encoder + quant_conv

  VaeConfig config_;
  EncoderWeights weights_;
};

}  // namespace h3::vae
