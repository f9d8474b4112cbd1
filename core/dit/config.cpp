#include "dit/config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "h3/error.h"

namespace h3::dit {
namespace {

using nlohmann::json;

// Reads the first of `keys` present; a missing key throws unless `fallback` is given.
template <typename T>
T read(const json& j, std::initializer_list<const char*> keys, const std::string& origin,
       const T* fallback = nullptr) {
  for (const char* k : keys) {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) continue;
    try {
      return it->get<T>();
    } catch (const json::exception& e) {
      throw Error(ErrorKind::kFormat,
                  origin + ": property '" + k + "' has the wrong type (" + e.what() + ")");
    }
  }
  if (fallback) return *fallback;
  throw Error(ErrorKind::kFormat, origin + ": missing property '" + *keys.begin() + "'");
}

int64_t req(const json& j, std::initializer_list<const char*> keys, const std::string& origin) {
  return read<int64_t>(j, keys, origin);
}

template <typename T>
T opt(const json& j, std::initializer_list<const char*> keys, const std::string& origin, T fallback) {
  return read<T>(j, keys, origin, &fallback);
}

}  // namespace

void DitConfig::validate(const std::string& origin) const {
  auto fail = [&](const std::string& what) {
    throw Error(ErrorKind::kFormat, origin + ": not an H3 DiT config: " + what);
  };
  auto positive = [&](int64_t v, const char* name) {
    if (v <= 0) fail(std::string(name) + " must be positive, got " + std::to_string(v));
  };
  positive(hidden_size, "hidden_size");
  positive(num_layers, "num_layers");
  if (num_refiner_layers < 0) fail("num_refiner_layers must not be negative");
  positive(num_heads, "num_attention_heads");
  positive(head_dim, "attention_head_dim");
  positive(ffn_dim, "ffn_dim");
  positive(in_channels, "in_channels");
  positive(audio_in_channels, "audio_in_channels");
  positive(text_dim, "text_dim");
  positive(time_embed_hidden_dim, "time_embed_hidden_dim");
  positive(time_embed_dim, "time_embed_dim");
  positive(rope_freq_dim, "rope_freq_dim");
  if (freq_dim <= 0 || freq_dim % 2 != 0) fail("freq_dim must be a positive even number");
  if (patch[0] != 1 || patch[1] <= 0 || patch[2] <= 0) {
    fail("patch_size must be [1, ph, pw] (the packed sequence has one latent frame per row)");
  }
  if (rope_dims() > head_dim) {
    fail("3 RoPE axes x 2 x rope_freq_dim = " + std::to_string(rope_dims()) + " exceeds attention_head_dim " +
         std::to_string(head_dim));
  }
  if (!(rope_theta > 0) || !(norm_eps > 0) || !(qk_norm_eps > 0) || !(final_norm_eps > 0)) {
    fail("rope_theta and the norm epsilons must be positive");
  }
}

DitConfig DitConfig::parse(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::kFormat, origin + ": invalid JSON (" + std::string(e.what()) + ")");
  }
  if (!j.is_object()) throw Error(ErrorKind::kFormat, origin + ": the config must be a JSON object");
  DitConfig c;
  // The native schema names its refiner depth differently; that key decides which schema this is.
  c.schema = j.contains("token_refiner_num_layers") || j.contains("adaln_out_features")
                 ? ConfigSchema::kNative
                 : ConfigSchema::kDiffusers;
  c.hidden_size = req(j, {"hidden_size"}, origin);
  c.num_layers = req(j, {"num_layers"}, origin);
  c.num_refiner_layers = req(j, {"num_refiner_layers", "token_refiner_num_layers"}, origin);
  c.num_heads = req(j, {"num_attention_heads"}, origin);
  c.head_dim = req(j, {"attention_head_dim"}, origin);
  c.ffn_dim = req(j, {"ffn_dim", "ffn_hidden_size"}, origin);
  c.in_channels = opt<int64_t>(j, {"in_channels", "latents_dim"}, origin, 24);
  c.audio_in_channels = opt<int64_t>(j, {"audio_in_channels", "audio_latents_dim"}, origin, 32);
  if (j.contains("patch_size")) {
    auto p = read<std::vector<int64_t>>(j, {"patch_size"}, origin);
    if (p.size() != 3) throw Error(ErrorKind::kFormat, origin + ": patch_size must hold 3 numbers");
    c.patch = {p[0], p[1], p[2]};
  }
  c.text_dim = req(j, {"text_dim"}, origin);
  c.freq_dim = opt<int64_t>(j, {"freq_dim", "timestep_input_dim"}, origin, 256);
  c.time_embed_hidden_dim = req(j, {"time_embed_hidden_dim", "time_embed_hidden_size"}, origin);
  c.time_embed_dim = req(j, {"time_embed_dim"}, origin);
  c.rope_freq_dim = opt<int64_t>(j, {"rope_freq_dim", "rope_inv_freq_len"}, origin, 16);
  c.rope_theta = opt<double>(j, {"rope_theta"}, origin, 10000.0);
  c.norm_eps = opt<double>(j, {"norm_eps"}, origin, 1e-5);
  c.qk_norm_eps = opt<double>(j, {"qk_norm_eps"}, origin, 1e-5);
  c.final_norm_eps = opt<double>(j, {"final_norm_eps"}, origin, 1e-5);
  c.validate(origin);
  // The native schema states the AdaLN widths; they must agree with the hidden size.
  if (j.contains("adaln_out_features") && req(j, {"adaln_out_features"}, origin) != c.adaln_width()) {
    throw Error(ErrorKind::kFormat, origin + ": adaln_out_features must be 18 x hidden_size = " +
                                        std::to_string(c.adaln_width()));
  }
  if (j.contains("final_adaln_out_features") &&
      req(j, {"final_adaln_out_features"}, origin) != c.final_adaln_width()) {
    throw Error(ErrorKind::kFormat, origin + ": final_adaln_out_features must be 2 x hidden_size = " +
                                        std::to_string(c.final_adaln_width()));
  }
  return c;
}

std::string DitConfig::to_json() const {
  json j = {{"_class_name", "MiniMaxH3Transformer3DModel"},
            {"num_attention_heads", num_heads},
            {"attention_head_dim", head_dim},
            {"hidden_size", hidden_size},
            {"num_layers", num_layers},
            {"num_refiner_layers", num_refiner_layers},
            {"ffn_dim", ffn_dim},
            {"in_channels", in_channels},
            {"audio_in_channels", audio_in_channels},
            {"patch_size", {patch[0], patch[1], patch[2]}},
            {"text_dim", text_dim},
            {"freq_dim", freq_dim},
            {"time_embed_hidden_dim", time_embed_hidden_dim},
            {"time_embed_dim", time_embed_dim},
            {"rope_freq_dim", rope_freq_dim},
            {"rope_theta", rope_theta},
            {"norm_eps", norm_eps},
            {"qk_norm_eps", qk_norm_eps},
            {"final_norm_eps", final_norm_eps}};
  return j.dump(2);
}

DitConfig DitConfig::load(const std::string& path) {
  std::filesystem::path p(path);
  if (std::filesystem::is_directory(p)) p /= "config.json";
  std::ifstream in(p);
  if (!in) {
    throw Error(ErrorKind::kNotFound,
                p.string() + ": cannot read the DiT config (give a transformer folder holding config.json)");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), p.string());
}

}  // namespace h3::dit
