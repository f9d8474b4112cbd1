#include "audio/weight_visitors.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <memory>

#include "common/shape.h"
#include "h3/error.h"
#include "io/checkpoint.h"

namespace h3::audio {

Fetch fetch_from(std::vector<std::pair<std::string, at::Tensor>> tensors) {
  auto held = std::make_shared<std::map<std::string, at::Tensor>>();
  for (auto& [name, t] : tensors) held->emplace(name, std::move(t));
  return [held](const std::string& name) {
    const auto it = held->find(name);
    return it == held->end() ? at::Tensor() : it->second;
  };
}

OpenedAudioVae open_audio_vae(const std::filesystem::path& audio_vae_dir) {
  const AudioVaeSource src = find_audio_vae(audio_vae_dir.string());
  if (src.native && !std::filesystem::is_regular_file(src.weights_path)) {
    throw Error(ErrorKind::kNotFound, src.weights_path +
                                          ": missing (the native audio VAE's weights, named by " +
                                          (audio_vae_dir / "config.json").string() + ")");
  }
  return {src.config, io::Checkpoint::open(src.weights_path)};
}

Fetch fetch_from(const io::Checkpoint& checkpoint) {
  return [&checkpoint](const std::string& name) {
    return checkpoint.find(name) ? checkpoint.view(name) : at::Tensor();
  };
}

at::Tensor Binder::optional(const std::string& name, at::IntArrayRef shape) const {
  at::Tensor t = fetch_(name);
  if (!t.defined()) return t;
  if (t.sizes() != shape) {
    throw Error(ErrorKind::kMismatch, origin_ + ": tensor '" + name + "' has shape " +
                                          shape_string(t.sizes()) + " but the config implies " +
                                          shape_string(shape) +
                                          " (is this the audio VAE that config.json describes?)");
  }
  if (!t.is_floating_point()) {
    throw Error(ErrorKind::kFormat, origin_ + ": tensor '" + name + "' is not a floating-point tensor");
  }
  return t.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true).contiguous();
}

at::Tensor Binder::required(const std::string& name, at::IntArrayRef shape) const {
  at::Tensor t = optional(name, shape);
  if (!t.defined()) missing("'" + name + "'");
  return t;
}

void Binder::conv(const ConvSpec& spec, Conv& c) const {
  const std::string& prefix = spec.prefix;
  const at::IntArrayRef shape(spec.shape);
  if (!spec.weight_normed) {
    c.weight = required(prefix + ".weight", shape);
  } else {
    const std::vector<int64_t> g_shape{shape[0], 1, 1};
    at::Tensor g = optional(prefix + ".weight_g", g_shape);
    at::Tensor v = optional(prefix + ".weight_v", shape);
    if (!g.defined() && !v.defined()) {
      g = optional(prefix + ".parametrizations.weight.original0", g_shape);
      v = optional(prefix + ".parametrizations.weight.original1", shape);
    }
    if (g.defined() && v.defined()) {
      c.weight = at::_weight_norm(v, g, 0).contiguous();
    } else if (!g.defined() && !v.defined()) {
      c.weight = optional(prefix + ".weight", shape);  // weight norm already removed
      if (!c.weight.defined()) {
        missing("'" + prefix + ".weight_g' / '" + prefix + ".weight_v' (nor '" + prefix +
                ".parametrizations.weight.original0' / 'original1', nor a plain '" + prefix + ".weight')");
      }
    } else {
      missing(std::string("the other half of the weight-norm pair of '") + prefix + "' (found only its " +
              (g.defined() ? "magnitude g" : "direction v") + ")");
    }
  }
  if (spec.bias == ConvSpec::Bias::kRequired) c.bias = required(prefix + ".bias", {spec.out_channels()});
  if (spec.bias == ConvSpec::Bias::kOptional) c.bias = optional(prefix + ".bias", {spec.out_channels()});
}

void Binder::snake(const SnakeSpec& spec, AntiAliasedSnake& a) const {
  const int64_t channels = spec.channels, taps = spec.taps;
  const at::Tensor alpha = required(spec.prefix + ".act.alpha", {channels});
  const at::Tensor beta = required(spec.prefix + ".act.beta", {channels});
  // SnakeBeta with log-scale parameters: x + 1/(e^beta + 1e-9) · sin²(x · e^alpha).
  a.alpha = alpha.exp().view({1, channels, 1});
  a.inv_beta = (1.0 / (beta.exp() + 1e-9)).view({1, channels, 1});
  // One filter for every channel, as the reference expands it.
  a.up_filter = required(spec.prefix + ".upsample.filter", {1, 1, taps});
  a.down_filter = required(spec.prefix + ".downsample.lowpass.filter", {1, 1, taps});
  const at::Tensor f = a.up_filter.flatten();
  a.up_polyphase = at::stack({f.slice(0, 0, taps, 2).flip(0), f.slice(0, 1, taps, 2).flip(0)}).unsqueeze(1);
}

void Binder::snake1d(const std::string& prefix, int64_t channels, at::Tensor& alpha) const {
  alpha = required(prefix + ".alpha", {1, channels, 1});
}

void Binder::linear(const LinearSpec& spec, Linear& l) const {
  l.weight = required(spec.prefix + ".weight", {spec.out, spec.in});
  if (spec.bias) l.bias = required(spec.prefix + ".bias", {spec.out});
}

void Binder::layer_norm(const std::string& prefix, int64_t channels, LayerNormWeights& n) const {
  n.weight = required(prefix + ".weight", {channels});
  n.bias = required(prefix + ".bias", {channels});
}

void Binder::vector(const std::string& name, int64_t n, at::Tensor& t) const {
  t = required(name, {n});
}

void Binder::missing(const std::string& what) const {
  throw Error(ErrorKind::kNotFound,
              origin_ + ": the audio VAE checkpoint has no " + what +
                  "; is this an H3 audio VAE (AutoencoderKLMiniMaxH3Audio) checkpoint?");
}

at::Tensor RandomWriter::randn(at::IntArrayRef shape, double std) {
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat)) * std;
}

void RandomWriter::conv(const ConvSpec& s, Conv&) {
  if (s.weight_normed) {
    // Random direction v, magnitude g = scale per row (the folded rows then have norm `scale`).
    const auto f32 = at::TensorOptions().dtype(at::kFloat);
    out.emplace_back(s.prefix + ".weight_g",
                     (at::rand({s.shape[0], 1, 1}, gen, f32) * 0.5 + 0.75) * s.random_scale);
    out.emplace_back(s.prefix + ".weight_v", randn(s.shape, 1.0));
  } else {
    out.emplace_back(s.prefix + ".weight", randn(s.shape, s.random_scale));
  }
  if (s.bias == ConvSpec::Bias::kRequired)
    out.emplace_back(s.prefix + ".bias", randn({s.out_channels()}, 0.02));
}

void RandomWriter::snake(const SnakeSpec& s, AntiAliasedSnake&) {
  out.emplace_back(s.prefix + ".act.alpha", randn({s.channels}, 0.2));
  out.emplace_back(s.prefix + ".act.beta", randn({s.channels}, 0.2));
  out.emplace_back(s.prefix + ".upsample.filter", filter.clone());
  out.emplace_back(s.prefix + ".downsample.lowpass.filter", filter.clone());
}

void RandomWriter::snake1d(const std::string& prefix, int64_t channels, at::Tensor&) {
  // Positive frequencies around 1 (Snake divides by alpha).
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  out.emplace_back(prefix + ".alpha", at::rand({1, channels, 1}, gen, f32) + 0.5);
}

void RandomWriter::linear(const LinearSpec& spec, Linear&) {
  out.emplace_back(spec.prefix + ".weight",
                   randn({spec.out, spec.in}, spec.random_scale / std::sqrt(static_cast<double>(spec.in))));
  if (spec.bias) out.emplace_back(spec.prefix + ".bias", randn({spec.out}, 0.02));
}

void RandomWriter::layer_norm(const std::string& prefix, int64_t channels, LayerNormWeights&) {
  out.emplace_back(prefix + ".weight", randn({channels}, 0.1) + 1.0);
  out.emplace_back(prefix + ".bias", randn({channels}, 0.02));
}

void RandomWriter::vector(const std::string& name, int64_t n, at::Tensor&) {
  out.emplace_back(name, randn({n}, 0.02));
}

void RandomWriter::unread(const std::string& name, const std::vector<int64_t>& shape, double std) {
  out.emplace_back(name,
                   std == 0.0 ? at::zeros(shape, at::TensorOptions().dtype(at::kFloat)) : randn(shape, std));
}

}  // namespace h3::audio
