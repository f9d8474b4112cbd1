#include "tools/tiny_model.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "audio/random_vae.h"
#include "dit/random_model.h"
#include "h3/error.h"
#include "h3_config.h"
#include "io/safetensors.h"
#include "text/random_encoder.h"
#include "text/tokenizer.h"
#include "vae/random_weights.h"

namespace h3 {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary);
  if (!out || !(out << text)) throw Error(ErrorKind::kNotFound, p.string() + ": cannot write");
}

// Each component draws from its own stream, so that it can be generated on its own.
uint64_t sub_seed(uint64_t seed, uint64_t component) {
  return seed * 1000003ULL + component;
}

json component_entry(const char* library, const char* cls, const char* subfolder) {
  return json::array({library, cls, {{"type_hint", {library, cls}}, {"subfolder", subfolder}}});
}

std::string model_index_json(const TinySpec& s, uint64_t seed) {
  json j = {
      {"_class_name", "MiniMaxH3ModularPipeline"},
      {"_diffusers_version", "0.36.0.dev0"},
      {"_gst_h3_tiny",
       "A tiny MiniMax-H3-architecture model with seeded random weights (no trained weights), made by "
       "`h3 make-tiny` for gst-h3's tests. Its output is structured noise; the embedded default is the "
       "trained data/default."},
      {"text_encoder", component_entry("transformers", "Qwen3VLForConditionalGeneration", "text_encoder")},
      {"tokenizer", component_entry("transformers", "Qwen2TokenizerFast", "tokenizer")},
      {"text_encoder_layer", s.text_encoder_layer},
      {"vae", component_entry("diffusers", "AutoencoderKLMiniMaxH3", "vae")},
      {"audio_vae", component_entry("diffusers", "AutoencoderKLMiniMaxH3Audio", "audio_vae")},
      {"transformer", component_entry("diffusers", "MiniMaxH3Transformer3DModel", "transformer")},
      {"scheduler", component_entry("diffusers", "MiniMaxH3Scheduler", "scheduler")},
      {"audio_scheduler", component_entry("diffusers", "MiniMaxH3Scheduler", "audio_scheduler")},
      {"gst_h3",
       {{"seed", seed},
        {"default_width", s.defaults.width},
        {"default_height", s.defaults.height},
        {"default_frames", s.defaults.num_frames},
        {"default_steps", s.defaults.steps}}},
  };
  if (s.conditioning) {
    // Ref2VA's DiT beside FL2VA's, as the diffusers layout keeps it, and the short edge its image
    // references are encoded at (the release's 2048 scaled to the tiny canvas).
    j["transformer_ref"] = component_entry("diffusers", "MiniMaxH3Transformer3DModel", "transformer_ref");
    j["gst_h3"]["reference_short_edge"] = s.defaults.reference_short_edge;
  }
  return j.dump(2) + "\n";
}

std::string scheduler_json(double shift) {
  json j = {{"_class_name", "MiniMaxH3Scheduler"}, {"_diffusers_version", "0.36.0.dev0"}, {"shift", shift}};
  return j.dump(2) + "\n";
}

}  // namespace

TinySpec tiny_spec() {
  TinySpec s;
  dit::DitConfig& d = s.dit;
  d.hidden_size = 64;
  d.num_layers = 2;
  d.num_refiner_layers = 2;
  d.num_heads = 2;
  d.head_dim = 128;  // inner 256 != hidden, as in the release; 96 of 128 dims rotated
  d.ffn_dim = 128;
  d.text_dim = 32;
  d.time_embed_hidden_dim = 64;
  d.time_embed_dim = 32;
  text::EncoderConfig& e = s.encoder;
  e.hidden_size = d.text_dim;
  e.num_layers = 3;
  e.num_heads = 4;
  e.num_kv_heads = 2;
  e.head_dim = 16;
  e.intermediate_size = 64;
  e.vocab_size = 151936;  // the release's embedding rows
  e.mrope_section = {4, 2, 2};
  e.mrope_interleaved = true;
  s.text_encoder_layer = 2;
  s.vae = vae::small_config(/*layers=*/2, /*heads=*/2, /*head_dim=*/32, /*stats_seed=*/7);
  // Small (the decoder ~0.23 M parameters, bf16): the release's rates and upsampling
  // kernels, but one AMP kernel per stage instead of three.
  s.audio = audio::small_config(/*latent_dim=*/32, /*decoder_dim=*/128, /*stats_seed=*/9);
  s.audio.resblock_kernel_sizes = {3};
  s.audio.resblock_dilation_sizes = {{1, 3, 5}};
  // The encoder (audio references) at the release's strides, 4 channels wide at first (128
  // after its five stages), two attention heads in pre_block.
  s.audio.encoder_dim = 4;
  s.audio.num_attention_heads = 2;
  s.audio.validate("tiny audio VAE config");
  s.defaults.width = 256;
  s.defaults.height = 160;
  s.defaults.num_frames = 48;
  s.defaults.steps = 8;
  return s;
}

const std::vector<std::string>& tiny_components() {
  static const std::vector<std::string> c{"model_index",  "transformer", "vae",       "audio_vae",
                                          "text_encoder", "tokenizer",   "scheduler", "audio_scheduler"};
  return c;
}

std::string vae_config_json(const vae::VaeConfig& c) {
  json j = {
      {"_class_name", "AutoencoderKLMiniMaxH3"},
      {"_diffusers_version", "0.36.0.dev0"},
      {"in_channels", 3},
      {"out_channels", c.out_channels},
      {"latent_channels", c.latent_channels},
      {"block_out_channels", c.encoder_channels},
      {"layers_per_block", c.encoder_layers_per_block},
      {"spatial_downsample_factors", c.encoder_spatial_down},
      {"temporal_downsample_factors", c.encoder_temporal_down},
      {"norm_num_groups", c.encoder_norm_groups},
      {"norm_eps", c.encoder_norm_eps},
      {"spatial_padding_mode", c.encoder_padding_mode},
      {"decoder_num_layers", c.num_layers},
      {"decoder_num_attention_heads", c.num_heads},
      {"decoder_attention_head_dim", c.head_dim},
      {"decoder_num_register_tokens", c.num_register_tokens},
      {"decoder_ffn_mult", c.ffn_mult},
      {"decoder_rope_theta", c.rope_theta},
      {"decoder_rope_dim_ratio", c.rope_dim_ratio},
      {"decoder_norm_eps", c.norm_eps},
      {"clip_length", c.clip_length},
      {"token_drop", c.token_drop},
      {"latents_mean", c.latents_mean},
      {"latents_std", c.latents_std},
  };
  if (c.patch_size != 16 || c.patch_size_t != 4) {
    throw Error(ErrorKind::kInvalidArgument,
                "vae_config_json: only the release's 16 x 4 patches are written");
  }
  return j.dump(2) + "\n";
}

std::string default_tokenizer_source() {
  const fs::path source(H3_SOURCE_TOKENIZER_DIR);
  if (fs::is_regular_file(source / text::Tokenizer::kVocabFile)) return source.string();
  return (fs::path(H3_DEFAULT_MODEL_DIR) / "tokenizer").string();
}

TinySpec tiny_conditioning_spec() {
  TinySpec s = tiny_spec();
  s.conditioning = true;
  s.defaults.reference_short_edge = 96;
  s.vae.encoder_channels = {8, 16, 16, 16, 24, 24};
  s.vae.encoder_norm_groups = 4;
  text::VisionConfig& v = s.vision;
  v.depth = 2;
  v.hidden_size = 32;
  v.num_heads = 4;
  v.intermediate_size = 64;
  v.patch_size = 16;
  v.temporal_patch_size = 2;
  v.spatial_merge_size = 2;
  v.out_hidden_size = s.dit.text_dim;
  v.num_position_embeddings = 144;
  v.deepstack_visual_indexes = {0, 1};
  return s;
}

TinySpec medium_spec() {
  TinySpec m = tiny_spec();
  m.dit.hidden_size = 384;
  m.dit.num_layers = 6;
  m.dit.num_heads = 4;
  m.dit.head_dim = 128;
  m.dit.ffn_dim = 1024;
  m.dit.text_dim = 256;
  m.dit.time_embed_hidden_dim = 384;
  m.dit.time_embed_dim = 192;
  m.vae.num_layers = 4;
  m.vae.num_heads = 4;
  m.vae.head_dim = 64;
  return m;
}

void write_tiny_model(const std::string& dir, uint64_t seed, const std::string& component,
                      const std::string& tokenizer_source) {
  write_random_model(dir, tiny_spec(), seed, component, tokenizer_source);
}

void write_random_model(const std::string& dir, const TinySpec& s, uint64_t seed,
                        const std::string& component, const std::string& tokenizer_source) {
  const auto& all = tiny_components();
  if (!component.empty() && std::find(all.begin(), all.end(), component) == all.end()) {
    std::string names;
    for (const auto& c : all) names += (names.empty() ? "" : ", ") + c;
    throw Error(ErrorKind::kInvalidArgument, "component '" + component + "': must be one of " + names);
  }
  auto want = [&](const char* c) { return component.empty() || component == c; };
  const fs::path root(dir);
  fs::create_directories(root);
  if (want("model_index")) write_text(root / "model_index.json", model_index_json(s, seed));
  if (want("scheduler")) write_text(root / "scheduler" / "scheduler_config.json", scheduler_json(12.0));
  if (want("audio_scheduler"))
    write_text(root / "audio_scheduler" / "scheduler_config.json", scheduler_json(3.0));
  if (want("transformer")) {
    dit::write_random_transformer((root / "transformer").string(), s.dit, sub_seed(seed, 1));
    // Ref2VA's DiT: the same shapes, other weights (the release's two partitions differ likewise).
    if (s.conditioning)
      dit::write_random_transformer((root / "transformer_ref").string(), s.dit, sub_seed(seed, 6));
  }
  if (want("vae")) {
    write_text(root / "vae" / "config.json", vae_config_json(s.vae));
    auto tensors = vae::random_decoder_tensors(s.vae, sub_seed(seed, 2));
    if (s.conditioning) tensors.merge(vae::random_encoder_tensors(s.vae, sub_seed(seed, 5)));
    io::write_safetensors((root / "vae" / "diffusion_pytorch_model.safetensors").string(),
                          std::vector<std::pair<std::string, at::Tensor>>(tensors.begin(), tensors.end()));
  }
  if (want("audio_vae"))
    audio::write_random_audio_vae((root / "audio_vae").string(), s.audio, sub_seed(seed, 4));
  if (want("text_encoder")) {
    text::EncoderConfig e = s.encoder;
    e.hidden_size = s.dit.text_dim;  // the encoder's rows are the DiT's text input
    text::VisionConfig v = s.vision;
    v.out_hidden_size = e.hidden_size;
    text::write_random_encoder((root / "text_encoder").string(), e, sub_seed(seed, 3),
                               s.conditioning ? &v : nullptr);
  }
  if (want("tokenizer")) {
    const fs::path from(tokenizer_source.empty() ? default_tokenizer_source() : tokenizer_source);
    fs::create_directories(root / "tokenizer");
    for (const char* f :
         {text::Tokenizer::kVocabFile, text::Tokenizer::kMergesFile, text::Tokenizer::kConfigFile}) {
      if (!fs::is_regular_file(from / f)) {
        throw Error(ErrorKind::kNotFound,
                    (from / f).string() +
                        ": missing: the tiny model's tokenizer/ is a copy of the project's "
                        "data/default/tokenizer (make-tiny --tokenizer DIR names another copy)");
      }
      fs::copy_file(from / f, root / "tokenizer" / f, fs::copy_options::overwrite_existing);
    }
  }
}

}  // namespace h3
