// The two visitors every audio VAE module declaration is walked with (decoder_modules.h,
// encoder_modules.h): Binder reads a checkpoint's tensors by name, checks their shapes and folds
// weight norm; RandomWriter draws seeded random tensors of the same names and shapes (tiny
// models, benchmarks). One declaration, two walks: the names cannot drift apart.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "audio/bigvgan.h"
#include "audio/config.h"
#include "audio/decoder_modules.h"
#include "io/checkpoint.h"

namespace h3::audio {

// A tensor by checkpoint name, undefined for a name not held.
using Fetch = std::function<at::Tensor(const std::string&)>;
// Over tensors held in memory (seeded random weights).
Fetch fetch_from(std::vector<std::pair<std::string, at::Tensor>> tensors);
// Over an open checkpoint's views (the checkpoint must outlive the binding).
Fetch fetch_from(const io::Checkpoint& checkpoint);

// An audio VAE folder's config and its weights, opened (either layout: find_audio_vae). Throws
// h3::Error naming the missing weights file.
struct OpenedAudioVae {
  AudioVaeConfig config;
  io::Checkpoint checkpoint;
};
OpenedAudioVae open_audio_vae(const std::filesystem::path& audio_vae_dir);

struct Linear {  // an nn.Linear: weight [out, in], bias [out] (undefined without one)
  at::Tensor weight, bias;
};
struct LayerNormWeights {  // an nn.LayerNorm with its affine weight and bias [C]
  at::Tensor weight, bias;
};
struct LinearSpec {
  std::string prefix;  // <prefix>.weight / .bias
  int64_t out = 0, in = 0;
  bool bias = true;
  double random_scale = 1.0;  // random weights' std is random_scale / sqrt(in)
};

// Reads tensors by checkpoint name, checks their shapes and makes fp32 copies of their own.
// Throws h3::Error naming `origin` and the tensor.
class Binder {
 public:
  Binder(const std::string& origin, const std::function<at::Tensor(const std::string&)>& fetch)
      : origin_(origin), fetch_(fetch) {}

  at::Tensor optional(const std::string& name, at::IntArrayRef shape) const;
  at::Tensor required(const std::string& name, at::IntArrayRef shape) const;

  // A convolution: a weight-normed one has v·g/||v|| folded once, here (norm over every axis
  // but 0, which is the output channel of a Conv1d and the input channel of a ConvTranspose1d).
  void conv(const ConvSpec& spec, Conv& c) const;
  // BigVGAN's anti-aliased SnakeBeta (log-scale parameters and its two filters).
  void snake(const SnakeSpec& spec, AntiAliasedSnake& a) const;
  // DAC's Snake: `<prefix>.alpha` [1, C, 1], kept as stored.
  void snake1d(const std::string& prefix, int64_t channels, at::Tensor& alpha) const;
  void linear(const LinearSpec& spec, Linear& l) const;
  void layer_norm(const std::string& prefix, int64_t channels, LayerNormWeights& n) const;
  void vector(const std::string& name, int64_t n, at::Tensor& t) const;
  // A tensor a checkpoint stores that the forward pass never reads (the posterior's log-std
  // head, a frozen zero bias): not looked up.
  void unread(const std::string&, const std::vector<int64_t>&, double) const {}

 private:
  [[noreturn]] void missing(const std::string& what) const;

  const std::string& origin_;
  const std::function<at::Tensor(const std::string&)>& fetch_;
};

// Draws stored tensors in declaration (checkpoint) order from one generator: the same seed
// gives the same weights.
struct RandomWriter {
  at::Generator gen;
  at::Tensor filter;  // the real anti-aliasing filter, which a checkpoint stores as it is
  std::vector<std::pair<std::string, at::Tensor>> out;

  at::Tensor randn(at::IntArrayRef shape, double std);
  void conv(const ConvSpec& s, Conv&);
  void snake(const SnakeSpec& s, AntiAliasedSnake&);
  void snake1d(const std::string& prefix, int64_t channels, at::Tensor&);
  void linear(const LinearSpec& spec, Linear&);
  void layer_norm(const std::string& prefix, int64_t channels, LayerNormWeights&);
  void vector(const std::string& name, int64_t n, at::Tensor&);
  void unread(const std::string& name, const std::vector<int64_t>& shape, double std);
};

}  // namespace h3::audio
