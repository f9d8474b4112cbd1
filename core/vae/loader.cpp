// VideoDecoder::load: a VAE folder to a decoder, through h3::io::Weights, which
// detects the layout and converts native tensors to the diffusers names.
#include <ATen/ATen.h>

#include "h3/error.h"
#include "io/weights.h"
#include "vae/video_decoder.h"

namespace h3::vae {

VideoDecoder VideoDecoder::load(const std::string& vae_dir) {
  const VaeSource src = find_vae(vae_dir);
  const VaeConfig& c = src.config;
  io::LayoutParams params{io::ModelKind::kVideoVae, c.num_heads, c.head_dim};
  const io::Weights weights = io::Weights::open(src.weights_path, params);
  io::LoadOptions opts;
  opts.dtype = at::kFloat;  // the CPU decode runs in fp32
  // Only the decoder's tensors are read; the encoder and anything else stay in the mapping.
  DecoderWeights w = bind_decoder_weights(c, [&](const std::string& name) {
    if (!weights.contains(name)) {
      throw Error(ErrorKind::kNotFound, weights.path() + ": the video VAE checkpoint has no tensor '" + name +
                                            "' (" + (weights.is_native() ? "native" : "diffusers") +
                                            " layout; is this the VAE that config.json describes?)");
    }
    return weights.load(name, {}, opts);
  });
  return VideoDecoder(c, std::move(w));
}

}  // namespace h3::vae
