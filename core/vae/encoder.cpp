#include "vae/encoder.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <string>
#include <vector>

#include "common/shape.h"
#include "dist/agree.h"
#include "dist/group.h"
#include "h3/error.h"
#include "io/weights.h"
#include "vae/tiling.h"

namespace h3::vae {
namespace {

// ImageNet statistics (the VAE's pixel convention, docs/h3-model.md §7.5).
constexpr double kPixelMean[3] = {0.485, 0.456, 0.406};
constexpr double kPixelStd[3] = {0.229, 0.224, 0.225};

// A causal 3D conv: symmetric spatial padding in `mode`, then `t_pad` zero frames prepended,
// then an unpadded conv (MiniMaxH3VideoCausalConv3d / the release's SpatialParallelConv3d).
at::Tensor causal_conv(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, int64_t s_pad,
                       int64_t t_pad, const std::string& mode, at::IntArrayRef stride = {1, 1, 1}) {
  at::Tensor h = x;
  if (s_pad > 0) {
    h = mode == "zeros" ? at::constant_pad_nd(h, {s_pad, s_pad, s_pad, s_pad, 0, 0}, 0)
                        : at::pad(h, {s_pad, s_pad, s_pad, s_pad, 0, 0}, mode);
  }
  if (t_pad > 0) h = at::constant_pad_nd(h, {0, 0, 0, 0, t_pad, 0}, 0);
  return at::conv3d(h, w, b, stride);
}

// GroupNorm over each frame alone ("t-isolated"), then SiLU. x: [1, C, T, H, W].
at::Tensor norm_silu(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, int64_t groups,
                     double eps) {
  const at::Tensor frames = x.squeeze(0).transpose(0, 1).contiguous();  // [T, C, H, W]
  at::Tensor y = at::group_norm(frames, groups, w, b, eps);
  y = at::silu_(y);
  return y.transpose(0, 1).unsqueeze(0);
}

}  // namespace

VideoEncoder::VideoEncoder(VaeConfig config, EncoderWeights weights)
    : config_(std::move(config)), weights_(std::move(weights)) {}

VideoEncoder VideoEncoder::load(const std::string& vae_dir) {
  const VaeSource src = find_vae(vae_dir);
  const VaeConfig& c = src.config;
  c.validate_encoder(vae_dir + "/config.json");
  io::LayoutParams params{io::ModelKind::kVideoVae, c.num_heads, c.head_dim};
  const io::Weights weights = io::Weights::open(src.weights_path, params);
  if (!weights.contains("encoder.conv_in.weight")) {
    throw Error(ErrorKind::kNotFound,
                weights.path() +
                    ": this video VAE checkpoint has no encoder (no 'encoder.conv_in.weight'); "
                    "encoding needs the full VAE (the release's vae/ or FL2VA/video_vae/)");
  }
  io::LoadOptions opts;
  opts.dtype = at::kFloat;  // the encoder runs in fp32 (diffusers pins it to fp32)
  EncoderWeights w = bind_encoder_weights(c, [&](const std::string& name) {
    if (!weights.contains(name)) {
      throw Error(ErrorKind::kNotFound, weights.path() + ": the video VAE checkpoint has no tensor '" + name +
                                            "' (" + (weights.is_native() ? "native" : "diffusers") +
                                            " layout; is this the VAE that config.json describes?)");
    }
    return weights.load(name, {}, opts);
  });
  return VideoEncoder(c, std::move(w));
}

VideoEncoder VideoEncoder::to(const c10::Device& device) const {
  return VideoEncoder(config_, to_device(config_, weights_, device));
}

int64_t VideoEncoder::latent_frames(int64_t frames) const {
  if (frames <= 1) return frames;
  int64_t per_clip = config_.clip_length;
  for (int64_t s : config_.encoder_temporal_down) per_clip = (per_clip - 1) / s + 1;
  const int64_t clips = (frames + config_.clip_length - 1) / config_.clip_length;
  return clips * per_clip - config_.token_drop;
}

at::Tensor VideoEncoder::encode_tile(const at::Tensor& x) const {
  const VaeConfig& c = config_;
  const EncoderWeights& w = weights_;
  const std::string& mode = c.encoder_padding_mode;
  const int64_t G = c.encoder_norm_groups;
  const double eps = c.encoder_norm_eps;
  at::Tensor h = causal_conv(x, w.conv_in_weight, w.conv_in_bias, 1, 2, mode);
  for (size_t i = 0; i < w.levels.size(); ++i) {
    const EncoderLevelWeights& level = w.levels[i];
    for (const EncoderResnetWeights& r : level.resnets) {
      at::Tensor y = norm_silu(h, r.norm1_weight, r.norm1_bias, G, eps);
      y = causal_conv(y, r.conv1_weight, r.conv1_bias, 1, 2, mode);
      y = norm_silu(y, r.norm2_weight, r.norm2_bias, G, eps);
      y = causal_conv(y, r.conv2_weight, r.conv2_bias, 1, 2, mode);
      const at::Tensor res =
          r.shortcut_weight.defined() ? at::conv3d(h, r.shortcut_weight, r.shortcut_bias) : h;
      h = res + y;
    }
    if (level.down_weight.defined()) {
      const int64_t ss = c.encoder_spatial_down[i], ts = c.encoder_temporal_down[i];
      // Stride 2 in space: one row / column padded at the bottom / right first (output ceil(n / 2)).
      if (ss == 2)
        h = mode == "zeros" ? at::constant_pad_nd(h, {0, 1, 0, 1, 0, 0}, 0)
                            : at::pad(h, {0, 1, 0, 1, 0, 0}, mode);
      h = causal_conv(h, level.down_weight, level.down_bias, 0, 2, mode, {ts, ss, ss});
    }
  }
  h = norm_silu(h, w.norm_out_weight, w.norm_out_bias, G, eps);
  h = causal_conv(h, w.conv_out_weight, w.conv_out_bias, 1, 2, mode);
  return at::conv3d(h, w.quant_conv_weight, w.quant_conv_bias);
}

at::Tensor VideoEncoder::encode_clip_tiles(const at::Tensor& x, bool tiling, dist::Group* g) const {
  const VaeConfig& c = config_;
  const int64_t r = c.patch_size, H = x.size(-2), W = x.size(-1);
  if (!tiling) return encode_tile(x);
  // The decoder's split (pixels), then the stitch in latent units: overlaps / 16.
  TileGrid px;
  px.y = split_axis(H, c.tile_size, c.tile_overlap_min, r);
  px.x = split_axis(W, c.tile_size, c.tile_overlap_min, r);
  const int64_t n = px.count();
  if (n == 1) return encode_tile(x);
  auto tile_pixels = [&](int64_t k) {
    const auto iy = static_cast<size_t>(k / px.cols()), jx = static_cast<size_t>(k % px.cols());
    return x.slice(-2, px.y.starts[iy], px.y.starts[iy] + px.y.lengths[iy])
        .slice(-1, px.x.starts[jx], px.x.starts[jx] + px.x.lengths[jx]);
  };
  // Every tile is tile_size square here, so the ranks' tiles stack and gather as one tensor.
  const int ranks = g ? g->size() : 1;
  const bool gather = ranks > 1 && n >= ranks;
  std::vector<at::Tensor> tiles(static_cast<size_t>(n));
  if (!gather) {
    for (int64_t k = 0; k < n; ++k) tiles[static_cast<size_t>(k)] = encode_tile(tile_pixels(k));
  } else {
    const int rank = g->rank();
    std::vector<at::Tensor> mine;
    dist::LocalFailure local;
    try {
      for (int64_t k = rank; k < n; k += ranks) mine.push_back(encode_tile(tile_pixels(k)));
    } catch (...) {
      local.capture();
    }
    dist::agree_or_throw(*g, local);  // a rank that failed must not leave its peers in the gather
    const std::vector<at::Tensor> all = g->all_gather(at::stack(mine, 0));
    for (int q = 0; q < ranks; ++q) {
      const at::Tensor& got = all[static_cast<size_t>(q)];
      for (int64_t m = 0; m < got.size(0); ++m) tiles[static_cast<size_t>(m * ranks + q)] = got[m];
    }
  }
  TileGrid lat = px;
  lat.unit = 1;
  for (AxisSplit* a : {&lat.y, &lat.x}) {
    for (auto* v : {&a->starts, &a->lengths, &a->overlaps}) {
      for (int64_t& e : *v) e /= r;
    }
  }
  return stitch_tiles(tiles, lat);
}

at::Tensor VideoEncoder::pixels_checked(const at::Tensor& frames, const char* what) const {
  const VaeConfig& c = config_;
  const std::string name(what);
  // Errors show the shape as the caller passed it (an image arrives here as [3, 1, H, W]).
  if (!frames.defined() || frames.dim() != 4) {
    throw Error(ErrorKind::kInvalidArgument,
                name + ": expected RGB frames [3, T, H, W] (channels first), got " +
                    (frames.defined() ? shape_string(frames.sizes()) : std::string("no tensor")));
  }
  const std::string shown = shape_string(name == "image" ? frames.squeeze(1).sizes() : frames.sizes());
  if (frames.size(0) != c.in_channels) {
    std::string hint = "pass channels first";
    if (frames.size(-1) == c.in_channels) hint = "the channels are last: permute to channels first";
    throw Error(ErrorKind::kInvalidArgument,
                name + " " + shown + ": the encoder takes " + std::to_string(c.in_channels) +
                    " colour channels first, got " + std::to_string(frames.size(0)) + " (" + hint + ")");
  }
  if (frames.scalar_type() != at::kByte && !at::isFloatingType(frames.scalar_type())) {
    throw Error(ErrorKind::kInvalidArgument,
                name + ": pixels must be uint8 (0..255) or floating point in [0, 1], got " +
                    std::string(c10::toString(frames.scalar_type())));
  }
  const int64_t T = frames.size(1), H = frames.size(2), W = frames.size(3), r = c.patch_size;
  if (T < 1) throw Error(ErrorKind::kInvalidArgument, name + ": no frames to encode");
  if (H % r != 0 || W % r != 0 || H < 2 * r || W < 2 * r) {
    throw Error(ErrorKind::kInvalidArgument,
                name + " of " + std::to_string(H) + " x " + std::to_string(W) +
                    " px cannot be encoded: height and width must be multiples of " + std::to_string(r) +
                    " px and at least " + std::to_string(2 * r) +
                    " px (two latents per axis: the encoder's reflect padding needs two pixels at its "
                    "coarsest level); resize or crop the input first");
  }
  // ImageNet-normalised fp32 pixels [1, 3, T, H, W], in the reference's order of operations.
  at::Tensor x = frames.to(device()).to(at::kFloat);
  if (frames.scalar_type() == at::kByte) x = x.div(255.0);
  const auto opt = x.options();
  const at::Tensor mean = at::tensor(at::ArrayRef<double>(kPixelMean, 3), opt).view({3, 1, 1, 1});
  const at::Tensor pstd = at::tensor(at::ArrayRef<double>(kPixelStd, 3), opt).view({3, 1, 1, 1});
  return ((x - mean) / pstd).unsqueeze(0);
}

at::Tensor VideoEncoder::moments_checked(const at::Tensor& frames, std::optional<bool> tiling,
                                         const char* what, dist::Group* g) const {
  const VaeConfig& c = config_;
  at::Tensor x;
  if (g == nullptr || g->size() == 1) {
    x = pixels_checked(frames, what);
  } else {
    dist::LocalFailure bad_input;  // every rank fails together, before any gather
    try {
      x = pixels_checked(frames, what);
    } catch (...) {
      bad_input.capture();
    }
    dist::agree_or_throw(*g, bad_input);
  }
  const int64_t T = x.size(2);
  const bool tiled = tiling.value_or(c.encoder_tiling);
  if (T == 1) return encode_clip_tiles(x, tiled, g);  // a single frame: the spatial path alone

  const int64_t L = c.clip_length;
  if (T % L != 0) x = at::cat({x, x.narrow(2, T - 1, 1).expand({-1, -1, L - T % L, -1, -1})}, 2);
  std::vector<at::Tensor> clips;
  for (int64_t s = 0; s < x.size(2); s += L) clips.push_back(encode_clip_tiles(x.narrow(2, s, L), tiled, g));
  at::Tensor m = clips.size() == 1 ? clips[0] : at::cat(clips, 2);
  if (c.token_drop > 0) m = m.narrow(2, 0, m.size(2) - c.token_drop);
  return m;
}

at::Tensor VideoEncoder::moments(const at::Tensor& frames, std::optional<bool> tiling) const {
  return moments_checked(frames, tiling, "video", nullptr);
}

at::Tensor VideoEncoder::moments(const at::Tensor& frames, dist::Group& g, std::optional<bool> tiling) const {
  return moments_checked(frames, tiling, "video", &g);
}

at::Tensor VideoEncoder::sample_posterior(const at::Tensor& moments, uint64_t seed) {
  const std::vector<at::Tensor> parts = moments.chunk(2, 1);
  const at::Tensor mean = parts[0];
  // ATen's fp32 exp, the reference's own op: on the CPU it is MKL's VML (HA, within one ulp), whose
  // path (picked by CPU vendor and ISA) decides which of two neighbouring floats about 1 % of the
  // values get. The same op gives the reference's numbers wherever MKL takes the reference's path; a
  // correctly rounded exp would differ from them at those 1 % on every CPU, and would not make a
  // seed's latents CPU-independent: the moments differ by ISA too (docs/vae.md, "Parity across CPUs").
  const at::Tensor sd = at::exp(0.5 * at::clamp(parts[1], -30.0, 20.0));
  // Drawn on the CPU wherever the moments are: the reference's generator is a CPU one, and a
  // device's generator would draw other numbers.
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const at::Tensor noise = at::randn(mean.sizes(), gen, mean.options().device(at::kCPU)).to(mean.device());
  return mean + sd * noise;
}

at::Tensor VideoEncoder::normalize(const at::Tensor& z) const {
  const int64_t C = config_.latent_channels;
  if (z.dim() != 5 || z.size(1) != C) {
    throw Error(ErrorKind::kInvalidArgument, "normalize: expected latents [1, " + std::to_string(C) +
                                                 ", t, h, w], got " + shape_string(z.sizes()));
  }
  // float32 statistics, as the reference makes them (torch.tensor of the config's floats).
  const auto opt = z.options().dtype(at::kFloat);
  const at::Tensor mean = at::tensor(config_.latents_mean, at::TensorOptions().dtype(at::kDouble)).to(opt);
  const at::Tensor sd = at::tensor(config_.latents_std, at::TensorOptions().dtype(at::kDouble)).to(opt);
  return (z.to(at::kFloat) - mean.view({1, C, 1, 1, 1})) / sd.view({1, C, 1, 1, 1});
}

at::Tensor VideoEncoder::encode(const at::Tensor& frames, const EncodeOptions& opts, const char* what,
                                dist::Group* g) const {
  const at::Tensor m = moments_checked(frames, opts.tiling, what, g);
  at::Tensor z = opts.sample ? sample_posterior(m, opts.seed) : m.chunk(2, 1)[0];
  if (opts.round_fp16) z = z.to(at::kHalf).to(at::kFloat);
  return normalize(z);
}

namespace {

// [3, H, W] -> [3, 1, H, W]; anything else is refused.
at::Tensor image_as_frames(const at::Tensor& image) {
  if (!image.defined() || image.dim() != 3) {
    throw Error(ErrorKind::kInvalidArgument,
                "image: expected RGB pixels [3, H, W] (channels first), got " +
                    (image.defined() ? shape_string(image.sizes()) : std::string("no tensor")));
  }
  return image.unsqueeze(1);
}

}  // namespace

at::Tensor VideoEncoder::encode_image(const at::Tensor& image, const EncodeOptions& opts) const {
  return encode(image_as_frames(image), opts, "image", nullptr);
}

at::Tensor VideoEncoder::encode_clip(const at::Tensor& frames, const EncodeOptions& opts) const {
  return encode(frames, opts, "video", nullptr);
}

at::Tensor VideoEncoder::encode_image(const at::Tensor& image, dist::Group& g,
                                      const EncodeOptions& opts) const {
  // A wrong rank shape would be refused on that rank alone: pass it on as a frame stack instead,
  // so that pixels_checked refuses it on every rank together.
  const at::Tensor frames = image.defined() && image.dim() == 3 ? image.unsqueeze(1) : image;
  return encode(frames, opts, "image", &g);
}

at::Tensor VideoEncoder::encode_clip(const at::Tensor& frames, dist::Group& g,
                                     const EncodeOptions& opts) const {
  return encode(frames, opts, "video", &g);
}

}  // namespace h3::vae
