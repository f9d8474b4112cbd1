#include "vae/config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "h3/error.h"
#include "io/config_json.h"

namespace h3::vae {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using io::config_error;
using io::read_double;
using io::read_doubles;
using io::read_int;

[[noreturn]] void bad(const std::string& origin, const std::string& what) {
  config_error(origin, what);
}

void read_bool(const json& j, const char* key, const std::string& origin, bool& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  if (it->is_boolean()) {
    out = it->get<bool>();
  } else if (it->is_number_integer()) {
    out = it->get<int64_t>() != 0;  // the native wrapper writes flags as 0/1
  } else {
    bad(origin, std::string("key '") + key + "' must be a boolean or 0/1");
  }
}

// Product of a list of down-sampling factors (spatial or temporal compression).
int64_t product_of(const json& j, const char* key, const std::string& origin, int64_t fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_array()) bad(origin, std::string("key '") + key + "' must be an array of integers");
  int64_t p = 1;
  for (const auto& x : *it) {
    if (!x.is_number_integer() || x.get<int64_t>() <= 0) {
      bad(origin, std::string("key '") + key + "' must hold positive integers");
    }
    p *= x.get<int64_t>();
  }
  return p;
}

}  // namespace

void VaeConfig::validate(const std::string& origin) const {
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) bad(origin, what);
  };
  need(latent_channels > 0, "latent_channels must be positive");
  need(out_channels > 0, "out_channels must be positive");
  need(patch_size > 0 && patch_size_t > 0, "the spatial and temporal compression factors must be positive");
  need(num_layers >= 0, "the decoder's layer count must not be negative");
  need(num_heads > 0 && head_dim > 0, "the decoder's head count and head dim must be positive");
  need(num_register_tokens >= 0, "the register token count must not be negative");
  need(ffn_mult > 0, "the decoder's ffn multiplier must be positive");
  need(rope_theta > 0, "the decoder's rope theta must be positive");
  need(rope_dim_ratio >= 0 && rope_dim_ratio <= 1, "the decoder's rope dim ratio must lie in [0, 1]");
  need(rope_dim() % 6 == 0,
       "the rotated dims per head (head_dim * rope_dim_ratio = " + std::to_string(rope_dim()) +
           ") must split into 3 axes of cos/sin pairs (a multiple of 6)");
  need(norm_eps > 0, "the decoder's norm eps must be positive");
  need(clip_length > 0, "clip_length must be positive");
  const int64_t chunk_tokens = (clip_length + patch_size_t - 1) / patch_size_t;
  need(token_drop >= 0 && token_drop < chunk_tokens,
       "token_drop must lie in [0, tokens per clip = " + std::to_string(chunk_tokens) + ")");
  need(tile_size > 0 && tile_size % patch_size == 0,
       "the tile size must be a positive multiple of " + std::to_string(patch_size) + " px");
  need(tile_overlap_min >= 0 && tile_overlap_min % patch_size == 0 && tile_overlap_min < tile_size,
       "the minimum tile overlap must be a multiple of " + std::to_string(patch_size) +
           " px smaller than the tile size");
  io::check_latent_stats(latents_mean, latents_std, latent_channels, origin);
}

void VaeConfig::validate_encoder(const std::string& origin) const {
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) bad(origin, "video VAE encoder: " + what);
  };
  const size_t levels = encoder_channels.size();
  need(levels > 0, "block_out_channels is empty");
  need(encoder_spatial_down.size() == levels && encoder_temporal_down.size() == levels,
       "block_out_channels, spatial_downsample_factors and temporal_downsample_factors must have one "
       "entry per level (" +
           std::to_string(levels) + ")");
  need(in_channels > 0, "in_channels must be positive");
  need(encoder_layers_per_block > 0, "layers_per_block must be positive");
  need(encoder_norm_groups > 0, "norm_num_groups must be positive");
  need(encoder_norm_eps > 0, "norm_eps must be positive");
  int64_t s = 1, t = 1;
  for (size_t i = 0; i < levels; ++i) {
    need(encoder_channels[i] > 0 && encoder_channels[i] % encoder_norm_groups == 0,
         "level " + std::to_string(i) + " has " + std::to_string(encoder_channels[i]) +
             " channels, not a positive multiple of norm_num_groups " + std::to_string(encoder_norm_groups));
    need(encoder_spatial_down[i] == 1 || encoder_spatial_down[i] == 2,
         "spatial downsample factors must be 1 or 2 (level " + std::to_string(i) + ")");
    need(encoder_temporal_down[i] == 1 || encoder_temporal_down[i] == 2,
         "temporal downsample factors must be 1 or 2 (level " + std::to_string(i) + ")");
    need(encoder_spatial_down[i] == 2 || encoder_temporal_down[i] == 1,
         "a level that halves time must also halve space (level " + std::to_string(i) +
             "): the reference's unpadded 3x3 stride-1 conv would shrink the frame");
    s *= encoder_spatial_down[i];
    t *= encoder_temporal_down[i];
  }
  need(s == patch_size && t == patch_size_t,
       "the downsample factors multiply to " + std::to_string(s) + " x " + std::to_string(t) +
           ", not the decoder's " + std::to_string(patch_size) + " x " + std::to_string(patch_size_t));
  need(encoder_padding_mode == "reflect" || encoder_padding_mode == "zeros" ||
           encoder_padding_mode == "replicate" || encoder_padding_mode == "circular",
       "spatial_padding_mode '" + encoder_padding_mode + "' is not reflect, zeros, replicate or circular");
  need(encoder_t_isolated_norm, "use_t_isolated_gn must be true (H3 normalises every frame alone)");
  need(encoder_causal, "causal_encoder must be true with zero temporal padding (padding_mode_t null)");
  need(clip_length > 0 && token_drop >= 0, "clip_length / token_drop out of range");
}

VaeConfig parse_diffusers_config(const std::string& json_text, const std::string& origin) {
  const json j = io::parse_config_json(json_text, origin);
  if (!j.contains("decoder_num_layers")) {
    bad(origin,
        "not a diffusers video-VAE config (no 'decoder_num_layers'); for the native layout "
        "point at the folder holding the wrapper config.json and source/");
  }
  VaeConfig c;
  read_int(j, "latent_channels", origin, c.latent_channels);
  read_int(j, "out_channels", origin, c.out_channels);
  c.patch_size = product_of(j, "spatial_downsample_factors", origin, c.patch_size);
  c.patch_size_t = product_of(j, "temporal_downsample_factors", origin, c.patch_size_t);
  read_int(j, "decoder_num_layers", origin, c.num_layers);
  read_int(j, "decoder_num_attention_heads", origin, c.num_heads);
  read_int(j, "decoder_attention_head_dim", origin, c.head_dim);
  read_int(j, "decoder_num_register_tokens", origin, c.num_register_tokens);
  read_int(j, "decoder_ffn_mult", origin, c.ffn_mult);
  read_double(j, "decoder_rope_theta", origin, c.rope_theta);
  read_double(j, "decoder_rope_dim_ratio", origin, c.rope_dim_ratio);
  read_double(j, "decoder_norm_eps", origin, c.norm_eps);
  read_int(j, "clip_length", origin, c.clip_length);
  read_int(j, "token_drop", origin, c.token_drop);
  c.latents_mean = read_doubles(j, "latents_mean", origin);
  c.latents_std = read_doubles(j, "latents_std", origin);
  // The encoder (checked by validate_encoder when an encoder is loaded).
  read_int(j, "in_channels", origin, c.in_channels);
  io::read_ints(j, "block_out_channels", origin, c.encoder_channels);
  io::read_ints(j, "spatial_downsample_factors", origin, c.encoder_spatial_down);
  io::read_ints(j, "temporal_downsample_factors", origin, c.encoder_temporal_down);
  read_int(j, "layers_per_block", origin, c.encoder_layers_per_block);
  read_int(j, "norm_num_groups", origin, c.encoder_norm_groups);
  read_double(j, "norm_eps", origin, c.encoder_norm_eps);
  if (j.contains("spatial_padding_mode") && j["spatial_padding_mode"].is_string()) {
    c.encoder_padding_mode = j["spatial_padding_mode"].get<std::string>();
  }
  c.validate(origin);
  return c;
}

VaeConfig parse_native_config(const std::string& wrapper_json, const std::string& wrapper_origin,
                              const std::string& source_json, const std::string& source_origin) {
  const json w = io::parse_config_json(wrapper_json, wrapper_origin);
  const json s = io::parse_config_json(source_json, source_origin);
  VaeConfig c;
  // Source config: the decoder architecture.
  if (s.contains("use_vit_decoder") && s["use_vit_decoder"].is_boolean() &&
      !s["use_vit_decoder"].get<bool>()) {
    bad(source_origin, "use_vit_decoder is false: only the ViT decoder of H3 is supported");
  }
  if (s.contains("pixel_norm_type") && s["pixel_norm_type"] != "imagenet") {
    bad(source_origin, "pixel_norm_type must be \"imagenet\" (the only pixel normalisation of H3)");
  }
  read_int(s, "embed_dim", source_origin, c.latent_channels);
  read_int(s, "out_ch", source_origin, c.out_channels);
  read_int(s, "vae_ratio", source_origin, c.patch_size);
  read_int(s, "vae_ratio_t", source_origin, c.patch_size_t);
  auto kw = s.find("vit_decoder_kwargs");
  if (kw == s.end() || !kw->is_object()) bad(source_origin, "missing object 'vit_decoder_kwargs'");
  read_int(*kw, "num_layers", source_origin, c.num_layers);
  read_int(*kw, "heads", source_origin, c.num_heads);
  read_int(*kw, "dim_head", source_origin, c.head_dim);
  read_int(*kw, "num_register_tokens", source_origin, c.num_register_tokens);
  read_int(*kw, "ffn_mult", source_origin, c.ffn_mult);
  read_double(*kw, "rope_theta", source_origin, c.rope_theta);
  read_double(*kw, "rope_dim_ratio", source_origin, c.rope_dim_ratio);
  if (kw->contains("ffn_use_gated") && (*kw)["ffn_use_gated"] != true) {
    bad(source_origin, "vit_decoder_kwargs.ffn_use_gated must be true (H3's gated SiLU FFN)");
  }
  if (kw->contains("qk_norm_affine") && (*kw)["qk_norm_affine"] != false) {
    bad(source_origin, "vit_decoder_kwargs.qk_norm_affine must be false (H3's q/k norm has no weights)");
  }
  // Wrapper config: temporal, tiling and latent statistics.
  int64_t wrapper_channels = c.latent_channels;
  read_int(w, "latent_channels", wrapper_origin, wrapper_channels);
  if (wrapper_channels != c.latent_channels) {
    bad(wrapper_origin, "latent_channels " + std::to_string(wrapper_channels) + " disagrees with " +
                            source_origin + " embed_dim " + std::to_string(c.latent_channels));
  }
  read_int(w, "vae_clip_length", wrapper_origin, c.clip_length);
  read_int(w, "vae_token_drop", wrapper_origin, c.token_drop);
  read_bool(w, "vae_decoder_tiling", wrapper_origin, c.tiling);
  read_int(w, "vae_tile_size", wrapper_origin, c.tile_size);
  read_int(w, "vae_tile_overlap_min", wrapper_origin, c.tile_overlap_min);
  c.latents_mean = read_doubles(w, "latents_mean", wrapper_origin);
  c.latents_std = read_doubles(w, "latents_std", wrapper_origin);
  // The encoder (EncoderFCN3D: channels ch * ch_mult, GroupNorm 32 / eps 1e-6 fixed in its code).
  read_int(s, "in_channels", source_origin, c.in_channels);
  int64_t ch = 0;
  read_int(s, "ch", source_origin, ch);
  std::vector<int64_t> mult;
  io::read_ints(s, "ch_mult", source_origin, mult);
  if (ch > 0 && !mult.empty()) {
    c.encoder_channels.clear();
    for (int64_t m : mult) c.encoder_channels.push_back(ch * m);
  }
  io::read_ints(s, "space_down", source_origin, c.encoder_spatial_down);
  io::read_ints(s, "time_down", source_origin, c.encoder_temporal_down);
  if (s.contains("num_res_blocks") && s["num_res_blocks"].is_array()) {
    std::vector<int64_t> blocks;
    io::read_ints(s, "num_res_blocks", source_origin, blocks);
    for (int64_t b : blocks) {
      if (b != blocks.front()) bad(source_origin, "num_res_blocks differs between levels: not supported");
    }
    if (!blocks.empty()) c.encoder_layers_per_block = blocks.front();
  } else {
    read_int(s, "num_res_blocks", source_origin, c.encoder_layers_per_block);
  }
  if (s.contains("padding_mode") && s["padding_mode"].is_string()) {
    c.encoder_padding_mode = s["padding_mode"].get<std::string>();
  }
  read_bool(s, "use_t_isolated_gn", source_origin, c.encoder_t_isolated_norm);
  read_bool(s, "causal_encoder", source_origin, c.encoder_causal);
  if (s.contains("padding_mode_t") && !s["padding_mode_t"].is_null() && s["padding_mode_t"] != "zeros") {
    c.encoder_causal = false;
  }
  read_bool(w, "vae_encoder_tiling", wrapper_origin, c.encoder_tiling);
  c.validate(wrapper_origin);
  return c;
}

VaeSource find_vae(const std::string& dir) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) {
    throw Error(ErrorKind::kNotFound, dir + ": not a folder (expected a VAE folder holding config.json)");
  }
  const fs::path cfg_path = root / "config.json";
  if (!fs::is_regular_file(cfg_path)) {
    throw Error(ErrorKind::kNotFound, cfg_path.string() + ": missing (expected the VAE's config.json)");
  }
  const std::string text = io::read_text_file(cfg_path);
  const json j = io::parse_config_json(text, cfg_path.string());
  VaeSource src;
  if (j.contains("decoder_num_layers")) {
    src.config = parse_diffusers_config(text, cfg_path.string());
    src.weights_path = root.string();
    src.native = false;
    return src;
  }
  if (j.contains("source_path") || j.contains("vae_clip_length")) {
    std::string sub = "source";
    if (j.contains("source_path") && j["source_path"].is_string()) sub = j["source_path"].get<std::string>();
    const fs::path source_dir = root / sub;
    const fs::path source_cfg = source_dir / "config.json";
    if (!fs::is_regular_file(source_cfg)) {
      throw Error(ErrorKind::kNotFound, source_cfg.string() + ": missing (the native VAE's source config)");
    }
    src.config =
        parse_native_config(text, cfg_path.string(), io::read_text_file(source_cfg), source_cfg.string());
    std::string file = "model.safetensors";
    if (j.contains("source_safetensors_path") && j["source_safetensors_path"].is_string()) {
      file = j["source_safetensors_path"].get<std::string>();
    }
    src.weights_path = (source_dir / file).string();
    src.native = true;
    return src;
  }
  if (j.contains("vit_decoder_kwargs")) {
    bad(cfg_path.string(),
        "this is a native source config without latent statistics; point at the folder "
        "above it, which holds the wrapper config.json");
  }
  bad(cfg_path.string(), "neither a diffusers video-VAE config nor a native wrapper config");
}

}  // namespace h3::vae
