#include "audio/random_vae.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "audio/audio_encoder.h"
#include "audio/bigvgan.h"
#include "h3/error.h"
#include "io/safetensors.h"

namespace h3::audio {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  if (!f) throw Error(ErrorKind::kNotFound, p.string() + ": cannot create the file");
  f << text;
  if (!f) throw Error(ErrorKind::kNotFound, p.string() + ": writing failed");
}

}  // namespace

void write_random_audio_vae(const std::string& dir, const AudioVaeConfig& c, uint64_t seed) {
  c.validate("random audio VAE config");
  const fs::path root(dir);
  fs::create_directories(root);
  const json wrapper = {{"_class_name", "MiniMaxH3AudioVAE"},
                        {"output_channel", 2},
                        {"sample_rate", c.sample_rate},
                        {"source_config_path", "config.yaml"},
                        {"source_safetensors_path", "model.safetensors"},
                        {"source_metadata_path", "metadata.json"},
                        {"latent_channels", c.latent_channels},
                        {"latents_mean", c.latents_mean},
                        {"latents_std", c.latents_std}};
  write_text(root / "config.json", wrapper.dump(2) + "\n");
  write_text(root / "config.yaml",
             "model_config:\n  sr: " + std::to_string(c.sample_rate) +
                 "\n  decoder_dim: " + std::to_string(c.decoder_dim) +
                 "\n  audio_channel: 1\n  vae_latent_channels: " + std::to_string(c.latent_channels) + "\n");
  const json metadata = {{"metadata",
                          {{"kwargs",
                            {{"decoder_type", "bigvgan"},
                             {"decoder_dim", c.decoder_dim},
                             {"encoder_dim", c.encoder_dim},
                             {"encoder_rates", c.encoder_rates},
                             {"num_attention_heads", c.num_attention_heads},
                             {"decoder_rates", c.decoder_rates},
                             {"decoder_kernel_sizes", c.decoder_kernel_sizes},
                             {"resblock_kernel_sizes", c.resblock_kernel_sizes},
                             {"resblock_dilation_sizes", c.resblock_dilation_sizes},
                             {"latent_dim", c.latent_dim},
                             {"sample_rate", c.sample_rate},
                             {"vae_latent_channels", c.latent_channels}}}}}};
  write_text(root / "metadata.json", metadata.dump(2) + "\n");
  auto tensors = random_checkpoint(c, seed);
  // The encoder from a generator of its own: the decoder's weights stay what they were before
  // the encoder was written.
  for (auto& named : random_encoder_checkpoint(c, seed ^ 0x656e636f646572ULL))
    tensors.push_back(std::move(named));
  for (auto& [name, t] : tensors) t = t.to(at::kBFloat16);
  io::write_safetensors((root / "model.safetensors").string(), tensors,
                        {{"format", "pt"}, {"gst_h3", "random audio VAE weights (h3 make-tiny)"}});
}

}  // namespace h3::audio
