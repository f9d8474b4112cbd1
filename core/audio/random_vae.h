// A random-weight audio VAE folder in the release's native layout (the embedded tiny model).
#pragma once

#include <cstdint>
#include <string>

#include "audio/config.h"

namespace h3::audio {

// Writes `dir`/config.json (the wrapper, with the latent statistics), config.yaml,
// metadata.json (the encoder and decoder kwargs, including the kernel lists) and
// model.safetensors (random_checkpoint's decoder, then random_encoder_checkpoint's encoder from
// a generator of its own, stored as bf16 to keep the folder small).
// The same seed gives the same bytes; AudioDecoder::load reads it back.
void write_random_audio_vae(const std::string& dir, const AudioVaeConfig& c, uint64_t seed);

}  // namespace h3::audio
