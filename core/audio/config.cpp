#include "audio/config.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "h3/error.h"
#include "io/config_json.h"

namespace h3::audio {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using io::config_error;

// Reach of a zero-padded "same" convolution: d·(k-1)/2 samples each side.
int64_t conv_reach(int64_t kernel, int64_t dilation) {
  return dilation * (kernel - 1) / 2;
}

// Reach of a transposed convolution (stride u, padding (k-u)/2) at its output rate: an input
// sample spreads p samples before its own u and k-u-p after them.
int64_t transposed_reach(int64_t kernel, int64_t stride) {
  const int64_t pad = (kernel - stride) / 2;
  return std::max(pad, kernel - stride - pad);
}

// Reach of BigVGAN's anti-aliased activation at its own rate: a 2x upsampling (replicate pad
// taps/2-1, transposed filter, crop) then a stride-2 lowpass (replicate pad taps/2-1 left,
// taps/2 right). Input m reaches upsampled samples [2m+lo, 2m+lo+taps-1] with
// lo = -(taps-2)/2, and upsampled i reaches outputs o with i in [2o-pl, 2o-pl+taps-1].
int64_t activation_reach(int64_t taps) {
  const int64_t up_lo = -(taps - 2) / 2;
  const int64_t up_hi = up_lo + taps - 1;
  const int64_t down_pad_left = taps / 2 - (taps % 2 == 0 ? 1 : 0);
  const int64_t left = (-up_lo + taps - 1 - down_pad_left) / 2;
  const int64_t right = (up_hi + down_pad_left) / 2;
  return std::max(left, right);
}

void check_scalar(const std::string& origin, const char* key, int64_t got, int64_t want,
                  const std::string& other) {
  if (got != want) {
    config_error(origin, std::string("'") + key + "' is " + std::to_string(got) + " but " + other + " says " +
                             std::to_string(want) + "; the files describe different models");
  }
}

// The integer scalars of config.yaml's `model_config:` block (a flat mapping of
// `key: value` lines is all the release writes; anything else is left unread).
std::map<std::string, int64_t> yaml_model_ints(const std::string& text) {
  std::map<std::string, int64_t> out;
  std::istringstream in(text);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const bool indented = line[0] == ' ' || line[0] == '\t';
    if (!indented) {
      inside = line.rfind("model_config:", 0) == 0;
      continue;
    }
    if (!inside) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t key_begin = line.find_first_not_of(" \t");
    const std::string key = line.substr(key_begin, colon - key_begin);
    const std::string value = line.substr(colon + 1);
    try {
      size_t used = 0;
      const int64_t v = std::stoll(value, &used);
      if (value.find_first_not_of(" \t", used) == std::string::npos) out[key] = v;
    } catch (const std::exception&) {
      // not an integer scalar: not one the decoder checks
    }
  }
  return out;
}

}  // namespace

int64_t AudioVaeConfig::hop() const {
  int64_t h = 1;
  for (int64_t r : decoder_rates) h *= r;
  return h;
}

int64_t AudioVaeConfig::reach_samples() const {
  const int64_t act = activation_reach(anti_alias_taps);
  int64_t block = 0;  // the widest AMP block: the stage mean reaches as far as it
  for (size_t j = 0; j < resblock_kernel_sizes.size(); ++j) {
    const int64_t k = resblock_kernel_sizes[j];
    int64_t r = 0;
    for (int64_t d : resblock_dilation_sizes[j]) r += act + conv_reach(k, d) + act + conv_reach(k, 1);
    block = std::max(block, r);
  }
  int64_t rate = hop();  // waveform samples per sample at the current stage
  int64_t reach = conv_reach(conv_pre_kernel, 1) * rate;
  for (int64_t i = 0; i < num_stages(); ++i) {
    rate /= decoder_rates[i];
    reach += (transposed_reach(decoder_kernel_sizes[i], decoder_rates[i]) + block) * rate;
  }
  return reach + act + conv_reach(conv_post_kernel, 1);
}

int64_t AudioVaeConfig::context_latents() const {
  return (reach_samples() + hop() - 1) / hop();
}

void AudioVaeConfig::validate(const std::string& origin) const {
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) config_error(origin, what);
  };
  need(latent_channels > 0, "latent_channels must be positive");
  need(latent_dim > 0, "latent_dim must be positive");
  need(!decoder_rates.empty(), "decoder_rates must not be empty");
  need(decoder_kernel_sizes.size() == decoder_rates.size(),
       "decoder_kernel_sizes has " + std::to_string(decoder_kernel_sizes.size()) + " values for " +
           std::to_string(decoder_rates.size()) + " decoder_rates");
  for (size_t i = 0; i < decoder_rates.size(); ++i) {
    const int64_t u = decoder_rates[i], k = decoder_kernel_sizes[i];
    need(u > 0 && k >= u && (k - u) % 2 == 0,
         "stage " + std::to_string(i) + ": kernel " + std::to_string(k) + " and rate " + std::to_string(u) +
             " do not upsample exactly (need kernel >= rate with an even difference)");
  }
  need(decoder_dim > 0 && (decoder_dim >> num_stages()) > 0 &&
           (decoder_dim >> num_stages()) << num_stages() == decoder_dim,
       "decoder_dim " + std::to_string(decoder_dim) + " must be divisible by 2^" +
           std::to_string(num_stages()) + " (each upsampling stage halves the channels)");
  need(!resblock_kernel_sizes.empty() && resblock_dilation_sizes.size() == resblock_kernel_sizes.size(),
       "resblock_dilation_sizes must hold one list per resblock kernel size");
  for (size_t j = 0; j < resblock_kernel_sizes.size(); ++j) {
    need(resblock_kernel_sizes[j] > 0 && resblock_kernel_sizes[j] % 2 == 1,
         "resblock kernel sizes must be odd");
    need(!resblock_dilation_sizes[j].empty(), "every resblock needs at least one dilation");
    for (int64_t d : resblock_dilation_sizes[j]) need(d > 0, "resblock dilations must be positive");
  }
  need(sample_rate > 0, "the sample rate must be positive");
  need(encoder_dim > 0 && !encoder_rates.empty(), "encoder_dim must be positive and encoder_rates not empty");
  int64_t encoder_hop = 1;
  for (int64_t r : encoder_rates) {
    need(r > 0, "encoder_rates must be positive");
    encoder_hop *= r;
  }
  need(encoder_hop == hop(), "encoder_rates downsample by " + std::to_string(encoder_hop) +
                                 " but decoder_rates upsample by " + std::to_string(hop()) +
                                 ": one latent must cover the same samples both ways");
  need(num_attention_heads > 0 && latent_dim % num_attention_heads == 0,
       "num_attention_heads " + std::to_string(num_attention_heads) + " must divide latent_dim " +
           std::to_string(latent_dim));
  need(anti_alias_taps >= 2 && anti_alias_taps % 2 == 0, "the anti-aliasing filters need an even tap count");
  io::check_latent_stats(latents_mean, latents_std, latent_channels, origin);
}

namespace {

// The keys shared by the diffusers config and the native metadata kwargs. The native layout's
// encoder keys are read under the diffusers names (DAC's own spelling) when present; absent,
// the release's values (the defaults) stand.
void read_decoder_keys(const json& j, const std::string& origin, AudioVaeConfig& c) {
  io::read_int(j, "latent_dim", origin, c.latent_dim);
  io::read_int(j, "decoder_dim", origin, c.decoder_dim);
  io::read_int(j, "encoder_dim", origin, c.encoder_dim);
  io::read_ints(j, "encoder_rates", origin, c.encoder_rates);
  io::read_int(j, "num_attention_heads", origin, c.num_attention_heads);
  io::read_ints(j, "decoder_rates", origin, c.decoder_rates);
  io::read_ints(j, "decoder_kernel_sizes", origin, c.decoder_kernel_sizes);
  io::read_ints(j, "resblock_kernel_sizes", origin, c.resblock_kernel_sizes);
  auto it = j.find("resblock_dilation_sizes");
  if (it != j.end() && !it->is_null()) {
    if (!it->is_array())
      config_error(origin, "key 'resblock_dilation_sizes' must be an array of integer arrays");
    c.resblock_dilation_sizes.clear();
    for (const auto& row : *it) {
      std::vector<int64_t> v;
      io::read_ints(json{{"row", row}}, "row", origin, v);
      c.resblock_dilation_sizes.push_back(std::move(v));
    }
  }
}

}  // namespace

AudioVaeConfig parse_diffusers_config(const std::string& json_text, const std::string& origin) {
  const json j = io::parse_config_json(json_text, origin);
  for (const char* key : {"decoder_dim", "latent_dim", "decoder_rates"}) {
    if (!j.contains(key)) {
      config_error(origin, std::string("not a diffusers audio-VAE config (no '") + key +
                               "'); for the release's native layout point at the folder whose config.json "
                               "names config.yaml and metadata.json");
    }
  }
  AudioVaeConfig c;
  io::read_int(j, "latent_channels", origin, c.latent_channels);
  io::read_int(j, "sampling_rate", origin, c.sample_rate);
  read_decoder_keys(j, origin, c);
  c.latents_mean = io::read_doubles(j, "latents_mean", origin);
  c.latents_std = io::read_doubles(j, "latents_std", origin);
  c.validate(origin);
  return c;
}

AudioVaeConfig parse_native_config(const std::string& wrapper_json, const std::string& wrapper_origin,
                                   const std::string& metadata_json, const std::string& metadata_origin,
                                   const std::string& yaml_text, const std::string& yaml_origin) {
  const json w = io::parse_config_json(wrapper_json, wrapper_origin);
  const json m = io::parse_config_json(metadata_json, metadata_origin);
  const json* kw = nullptr;
  if (m.contains("metadata") && m["metadata"].is_object() && m["metadata"].contains("kwargs") &&
      m["metadata"]["kwargs"].is_object()) {
    kw = &m["metadata"]["kwargs"];
  } else {
    config_error(metadata_origin, "missing object 'metadata.kwargs' (the decoder's settings)");
  }
  if (kw->contains("decoder_type") && (*kw)["decoder_type"] != "bigvgan") {
    config_error(metadata_origin, "decoder_type must be \"bigvgan\" (the only audio decoder of H3)");
  }
  for (const char* key : {"decoder_dim", "latent_dim", "decoder_rates"}) {
    if (!kw->contains(key))
      config_error(metadata_origin, std::string("metadata.kwargs has no '") + key + "'");
  }
  AudioVaeConfig c;
  read_decoder_keys(*kw, metadata_origin, c);
  io::read_int(*kw, "vae_latent_channels", metadata_origin, c.latent_channels);
  io::read_int(*kw, "sample_rate", metadata_origin, c.sample_rate);

  int64_t wrapper_channels = c.latent_channels, wrapper_rate = c.sample_rate;
  io::read_int(w, "latent_channels", wrapper_origin, wrapper_channels);
  io::read_int(w, "sample_rate", wrapper_origin, wrapper_rate);
  check_scalar(wrapper_origin, "latent_channels", wrapper_channels, c.latent_channels, metadata_origin);
  check_scalar(wrapper_origin, "sample_rate", wrapper_rate, c.sample_rate, metadata_origin);

  const auto yaml = yaml_model_ints(yaml_text);
  const std::pair<const char*, int64_t> yaml_checks[] = {
      {"sr", c.sample_rate}, {"decoder_dim", c.decoder_dim}, {"vae_latent_channels", c.latent_channels}};
  for (const auto& [key, want] : yaml_checks) {
    auto it = yaml.find(key);
    if (it != yaml.end()) check_scalar(yaml_origin, key, it->second, want, metadata_origin);
  }
  c.latents_mean = io::read_doubles(w, "latents_mean", wrapper_origin);
  c.latents_std = io::read_doubles(w, "latents_std", wrapper_origin);
  c.validate(wrapper_origin);
  return c;
}

AudioVaeSource find_audio_vae(const std::string& dir) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) {
    throw Error(ErrorKind::kNotFound,
                dir + ": not a folder (expected an audio VAE folder holding config.json)");
  }
  const fs::path cfg_path = root / "config.json";
  if (!fs::is_regular_file(cfg_path)) {
    throw Error(ErrorKind::kNotFound, cfg_path.string() + ": missing (expected the audio VAE's config.json)");
  }
  const std::string text = io::read_text_file(cfg_path);
  const json j = io::parse_config_json(text, cfg_path.string());
  auto name_in = [&](const char* key, const char* fallback) {
    if (j.contains(key) && j[key].is_string()) return j[key].get<std::string>();
    return std::string(fallback);
  };
  AudioVaeSource src;
  if (j.contains("source_metadata_path") || j.contains("source_config_path")) {
    const fs::path meta = root / name_in("source_metadata_path", "metadata.json");
    const fs::path yaml = root / name_in("source_config_path", "config.yaml");
    for (const fs::path& p : {meta, yaml}) {
      if (!fs::is_regular_file(p)) {
        throw Error(ErrorKind::kNotFound,
                    p.string() + ": missing (named by " + cfg_path.string() +
                        "; the release's native audio VAE keeps it beside config.json)");
      }
    }
    src.config = parse_native_config(text, cfg_path.string(), io::read_text_file(meta), meta.string(),
                                     io::read_text_file(yaml), yaml.string());
    src.weights_path = (root / name_in("source_safetensors_path", "model.safetensors")).string();
    src.native = true;
  } else {
    src.config = parse_diffusers_config(text, cfg_path.string());
    src.weights_path = root.string();
    src.native = false;
  }
  return src;
}

AudioVaeConfig small_config(int64_t latent_dim, int64_t decoder_dim, uint64_t stats_seed) {
  AudioVaeConfig c;
  c.latent_dim = latent_dim;
  c.decoder_dim = decoder_dim;
  at::Generator gen = at::detail::createCPUGenerator(stats_seed);
  const auto opt = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor mean = at::randn({c.latent_channels}, gen, opt) * 0.3;
  const at::Tensor std = at::rand({c.latent_channels}, gen, opt) * 1.5 + 1.5;
  c.latents_mean.assign(mean.data_ptr<double>(), mean.data_ptr<double>() + c.latent_channels);
  c.latents_std.assign(std.data_ptr<double>(), std.data_ptr<double>() + c.latent_channels);
  c.validate("small audio VAE config");
  return c;
}

}  // namespace h3::audio
