#include "text/vision_tower.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/shape.h"
#include "dit/tp.h"
#include "h3/error.h"
#include "io/checkpoint.h"
#include "text/checkpoint_tensor.h"

#if __has_include(<ATen/ops/scaled_dot_product_attention.h>)
#define H3_HAVE_FUSED_SDPA 1
#else
#define H3_HAVE_FUSED_SDPA 0
#endif

namespace h3::text {
namespace {

// Reads one tensor (or this rank's part of it) into storage of its own, after checking its full
// shape against the config.
at::Tensor read(const io::Checkpoint& ck, const VisionParameter& p, int rank, int size,
                const EncoderOptions& o, at::ScalarType dtype) {
  const at::Tensor v = rank_part(checked_view(ck, p.name, p.shape, "the vision tower"), p.name, p.shape,
                                 p.split, p.parts, rank, size);
  return owned_copy(v, at::TensorOptions().dtype(dtype).device(o.device));
}

at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({x.narrow(-1, half, half).neg(), x.narrow(-1, 0, half)}, -1);
}

// Full (non-causal) attention of q, k, v [heads, n, D], scaled by 1/sqrt(D): [heads, n, D].
at::Tensor full_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if H3_HAVE_FUSED_SDPA
  return at::scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)).squeeze(0);
#else
  const int64_t heads = q.size(0), n = q.size(1), d = q.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto qf = q.to(at::kFloat).mul(scale), kf = k.to(at::kFloat), vf = v.to(at::kFloat);
  auto out = at::empty({heads, n, d}, qf.options());
  // Blocks of queries so that the fp32 score buffer stays about 16 MiB.
  const int64_t block = std::max<int64_t>(16, (int64_t(1) << 22) / std::max<int64_t>(1, heads * n));
  for (int64_t i0 = 0; i0 < n; i0 += block) {
    const int64_t b = std::min(block, n - i0);
    auto scores = at::bmm(qf.narrow(1, i0, b), kf.transpose(1, 2));
    out.narrow(1, i0, b).copy_(at::bmm(at::softmax(scores, -1), vf));
  }
  return out.to(q.scalar_type());
#endif
}

at::Tensor merge(const at::Tensor& x, const VisionMergerWeights& m, int64_t merged, bool postshuffle) {
  at::Tensor y;
  if (postshuffle) {
    auto v = x.reshape({-1, merged});
    y = at::layer_norm(v, {merged}, m.norm_weight, m.norm_bias, 1e-6);
  } else {
    y = at::layer_norm(x, {x.size(-1)}, m.norm_weight, m.norm_bias, 1e-6).reshape({-1, merged});
  }
  y = at::gelu(at::linear(y, m.fc1_weight, m.fc1_bias));  // exact (erf) GELU: nn.GELU()
  return at::linear(y, m.fc2_weight, m.fc2_bias);
}

[[noreturn]] void bad_image(const at::Tensor& image, const std::string& what) {
  throw Error(ErrorKind::kInvalidArgument,
              "vision tower: image " +
                  (image.defined() ? shape_string(image.sizes().vec()) : std::string("(none)")) + ": " +
                  what);
}

}  // namespace

at::Tensor vision_patch_coordinates(int64_t rows, int64_t columns, int64_t merge) {
  auto out = at::empty({rows * columns, 2}, at::TensorOptions().dtype(at::kLong));
  auto a = out.accessor<int64_t, 2>();
  int64_t i = 0;
  for (int64_t br = 0; br < rows / merge; ++br)
    for (int64_t bc = 0; bc < columns / merge; ++bc)
      for (int64_t ir = 0; ir < merge; ++ir)
        for (int64_t ic = 0; ic < merge; ++ic, ++i) {
          a[i][0] = br * merge + ir;
          a[i][1] = bc * merge + ic;
        }
  return out;
}

std::pair<at::Tensor, at::Tensor> vision_position_taps(const VisionConfig& c, int64_t rows, int64_t columns) {
  const int64_t side = c.position_side(), n = rows * columns;
  const auto coords = vision_patch_coordinates(rows, columns, c.spatial_merge_size);
  const auto ca = coords.accessor<int64_t, 2>();
  auto idx = at::empty({n, 4}, at::TensorOptions().dtype(at::kLong));
  auto wts = at::empty({n, 4}, at::TensorOptions().dtype(at::kFloat));
  auto ia = idx.accessor<int64_t, 2>();
  auto wa = wts.accessor<float, 2>();
  // One axis: source coordinate index * (side - 1) / (size - 1) (align_corners; fp32 as the
  // reference computes it), taps floor and floor + 1 clamped to the table, hat weights.
  auto axis = [&](int64_t index, int64_t size, int64_t taps[2], float weights[2]) {
    const float src = static_cast<float>(static_cast<float>(index) * static_cast<float>(side - 1)) /
                      static_cast<float>(std::max<int64_t>(size - 1, 1));
    const float fl = std::floor(src);
    for (int o = 0; o < 2; ++o) {
      taps[o] = std::clamp<int64_t>(static_cast<int64_t>(fl) + o, 0, side - 1);
      const float dist = std::abs(src - fl - static_cast<float>(o));
      weights[o] = std::max(1.0f - dist, 0.0f);
    }
  };
  for (int64_t i = 0; i < n; ++i) {
    int64_t ht[2], wt[2];
    float hw[2], ww[2];
    axis(ca[i][0], rows, ht, hw);
    axis(ca[i][1], columns, wt, ww);
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b) {
        ia[i][a * 2 + b] = ht[a] * side + wt[b];
        wa[i][a * 2 + b] = hw[a] * ww[b];
      }
  }
  return {idx, wts};
}

VisionTower VisionTower::load(const std::string& dir, dist::Group* group, const EncoderOptions& o,
                              const ImageProcessorConfig& processor) {
  VisionTower t;
  t.dir_ = dir;
  t.config_ = VisionConfig::load(dir);
  t.processor_ = processor;
  const VisionConfig& c = t.config_;
  const dit::TensorParallel tp(group);
  c.check_tp(tp.size(), dir + "/config.json");
  t.group_ = group;
  t.tp_rank_ = tp.rank();
  t.tp_size_ = tp.size();
  const at::ScalarType dtype = o.dtype.value_or(o.device.is_cuda() ? at::kBFloat16 : at::kFloat);
  const io::Checkpoint ck = io::Checkpoint::open(dir);
  t.weights_.blocks.resize(static_cast<size_t>(c.depth));
  t.weights_.deepstack.resize(c.deepstack_visual_indexes.size());
  declare_vision_parameters(c, t.weights_, [&](const VisionParameter& p, at::Tensor& slot) {
    slot = read(ck, p, tp.rank(), tp.size(), o, dtype);
  });
  return t;
}

namespace {

// (x - mean * 255) / (std * 255) in fp32 over [..., 3, h, w] uint8 (the reference fuses the 1/255
// rescale into mean and std).
at::Tensor normalized(const at::Tensor& resized, const ImageProcessorConfig& pc) {
  std::vector<float> mean(3), sd(3);
  const float to_255 = static_cast<float>(1.0 / (1.0 / 255.0));
  for (int i = 0; i < 3; ++i) {
    mean[i] = static_cast<float>(pc.mean[i]) * to_255;
    sd[i] = static_cast<float>(pc.std[i]) * to_255;
  }
  auto norm = resized.to(at::kFloat);
  norm.sub_(at::tensor(mean).view({3, 1, 1})).div_(at::tensor(sd).view({3, 1, 1}));
  return norm;
}

}  // namespace

VisionInputs VisionTower::preprocess(const at::Tensor& image) const {
  const VisionConfig& c = config_;
  const ImageProcessorConfig& pc = processor_;
  if (!image.defined() || image.dim() != 3 || image.size(2) != c.in_channels) {
    bad_image(image, "must be [height, width, " + std::to_string(c.in_channels) +
                         "] (RGB, channels last): convert it to RGB first");
  }
  if (image.scalar_type() != at::kByte) {
    bad_image(image, std::string("must be uint8 (0..255), not ") + c10::toString(image.scalar_type()) +
                         ": convert the pixels to 8 bits");
  }
  const int64_t H = image.size(0), W = image.size(1);
  if (H < pc.min_side || W < pc.min_side) {
    bad_image(image, "is smaller than " + std::to_string(pc.min_side) + " x " + std::to_string(pc.min_side) +
                         " pixels (one patch): give a larger image");
  }
  if (H * W > pc.max_input_pixels) {
    bad_image(image, "has " + std::to_string(H * W) + " pixels, over the " +
                         std::to_string(pc.max_input_pixels) +
                         " accepted (the processor would shrink it to at most " +
                         std::to_string(pc.max_pixels) + " anyway): downscale it first");
  }
  const int64_t p = c.patch_size, m = c.spatial_merge_size;
  std::array<int64_t, 2> hw;
  try {
    hw = smart_resize(H, W, p * m, pc.min_pixels, pc.max_pixels);
  } catch (const Error& e) {
    bad_image(image, e.what());
  }
  // [1, 3, H, W] with the channels innermost, as torchvision sees an HWC array.
  auto x = image.to(at::kCPU).permute({2, 0, 1}).unsqueeze(0);
  at::Tensor resized;
  if (hw[0] == H && hw[1] == W) {
    resized = x;
  } else {
    resized = at::_upsample_bicubic2d_aa(x.contiguous(at::MemoryFormat::ChannelsLast), {hw[0], hw[1]},
                                         /*align_corners=*/false, std::nullopt, std::nullopt);
  }
  resized = resized.squeeze(0).contiguous();  // [3, h, w] uint8
  const at::Tensor norm = normalized(resized, pc);
  // Patches: [rows/m, cols/m, m, m, channel, frame, p, p], the image repeated over the frames.
  const int64_t gh = hw[0] / p, gw = hw[1] / p, T = c.temporal_patch_size, C = c.in_channels;
  auto patches = norm.view({C, gh / m, m, p, gw / m, m, p})
                     .permute({1, 4, 2, 5, 0, 3, 6})
                     .unsqueeze(5)
                     .expand({gh / m, gw / m, m, m, C, T, p, p})
                     .reshape({gh * gw, C * T * p * p});
  VisionInputs out;
  out.patches = patches.contiguous();
  out.grid_thw = {1, gh, gw};
  out.resized = resized;
  return out;
}

VisionInputs VisionTower::preprocess_video(const at::Tensor& frames) const {
  const VisionConfig& c = config_;
  const ImageProcessorConfig& pc = processor_;
  if (!frames.defined() || frames.dim() != 4 || frames.size(3) != c.in_channels ||
      frames.scalar_type() != at::kByte) {
    bad_image(frames, "must be uint8 [frames, height, width, " + std::to_string(c.in_channels) +
                          "] (RGB, channels last)");
  }
  const int64_t S = frames.size(0), H = frames.size(1), W = frames.size(2);
  if (H < pc.min_side || W < pc.min_side) {
    bad_image(frames, "has frames smaller than " + std::to_string(pc.min_side) + " x " +
                          std::to_string(pc.min_side) + " pixels (one patch)");
  }
  const int64_t p = c.patch_size, m = c.spatial_merge_size, T = c.temporal_patch_size, C = c.in_channels;
  std::array<int64_t, 2> hw;
  try {
    hw = smart_resize_video(S, H, W, p * m, T, pc.video_min_pixels, pc.video_max_pixels);
  } catch (const Error& e) {
    bad_image(frames, e.what());
  }
  // [S, 3, H, W] with the channels innermost, each frame resized as an image is.
  auto x = frames.to(at::kCPU).permute({0, 3, 1, 2});
  at::Tensor resized =
      hw[0] == H && hw[1] == W
          ? x
          : at::_upsample_bicubic2d_aa(x.contiguous(at::MemoryFormat::ChannelsLast), {hw[0], hw[1]},
                                       /*align_corners=*/false, std::nullopt, std::nullopt);
  resized = resized.contiguous();  // [S, 3, h, w] uint8
  at::Tensor norm = normalized(resized, pc);
  // The last frame repeated to whole temporal patches, then patches [t, rows/m, cols/m, m, m,
  // channel, frame, p, p]: each pair of frames makes one frame of patches.
  if (const int64_t pad = (T - S % T) % T; pad > 0) {
    norm = at::cat({norm, norm.narrow(0, S - 1, 1).expand({pad, C, hw[0], hw[1]})});
  }
  const int64_t t = norm.size(0) / T, gh = hw[0] / p, gw = hw[1] / p;
  auto patches = norm.view({t, T, C, gh / m, m, p, gw / m, m, p})
                     .permute({0, 3, 6, 4, 7, 2, 1, 5, 8})
                     .reshape({t * gh * gw, C * T * p * p});
  VisionInputs out;
  out.patches = patches.contiguous();
  out.grid_thw = {t, gh, gw};
  out.resized = resized;
  return out;
}

VisionFeatures VisionTower::forward(const at::Tensor& patches, const std::array<int64_t, 3>& grid) const {
  const VisionConfig& c = config_;
  const VisionWeights& w = weights_;
  const int64_t m = c.spatial_merge_size;
  const auto [t, gh, gw] = grid;
  if (t < 1 || gh < m || gw < m || gh % m != 0 || gw % m != 0) {
    throw Error(ErrorKind::kInvalidArgument, "vision tower: grid_thw [" + std::to_string(t) + ", " +
                                                 std::to_string(gh) + ", " + std::to_string(gw) +
                                                 "] must have t >= 1 and rows and columns multiples of " +
                                                 std::to_string(m) + " (preprocess() gives it)");
  }
  const int64_t n = t * gh * gw, frame = gh * gw;
  if (!patches.defined() || patches.dim() != 2 || patches.size(0) != n ||
      patches.size(1) != c.patch_width()) {
    throw Error(ErrorKind::kInvalidArgument,
                "vision tower: patches must be [" + std::to_string(n) + ", " +
                    std::to_string(c.patch_width()) + "] for grid_thw [" + std::to_string(t) + ", " +
                    std::to_string(gh) + ", " + std::to_string(gw) + "], got " +
                    (patches.defined() ? shape_string(patches.sizes().vec()) : std::string("none")));
  }
  const auto dev = w.pos_embed.device();
  const auto dtype = w.pos_embed.scalar_type();
  const dit::TensorParallel tp(group_);
  const int64_t W = c.hidden_size, D = c.head_dim();

  // Patch embedding: the Conv3d's kernel equals its stride, so it is one matrix product.
  auto x = at::linear(patches.to(dev, dtype), w.patch_weight.reshape({W, -1}), w.patch_bias);
  // The position table resampled to the grid (the same for every frame).
  auto [idx, wts] = vision_position_taps(c, gh, gw);
  auto pos = (w.pos_embed.index_select(0, idx.view({-1}).to(dev)).view({frame, 4, W}) *
              wts.to(dev, dtype).unsqueeze(2))
                 .sum(1);
  x = x + (t == 1 ? pos : pos.repeat({t, 1}));
  // Rotary angles: frequencies 1 / theta^(2j / (D/2)), j < D/4, of the row then the column; the
  // whole repeated for the two rotate-half halves.
  const int64_t quarter = D / 4;
  auto inv = at::pow(c.rope_theta, at::arange(0, D / 2, 2, at::TensorOptions().dtype(at::kFloat)) /
                                       static_cast<double>(D / 2))
                 .reciprocal();
  auto coords = vision_patch_coordinates(gh, gw, m).to(at::kFloat);  // [frame, 2]
  auto freqs = (coords.unsqueeze(2) * inv.view({1, 1, quarter})).reshape({frame, 2 * quarter});
  auto emb = at::cat({freqs, freqs}, -1);
  if (t > 1) emb = emb.repeat({t, 1});
  auto cos = emb.cos().to(dev).unsqueeze(1), sin = emb.sin().to(dev).unsqueeze(1);  // [n, 1, D] fp32

  VisionFeatures out;
  for (size_t li = 0; li < w.blocks.size(); ++li) {
    const auto& b = w.blocks[li];
    auto y = at::layer_norm(x, {W}, b.norm1_weight, b.norm1_bias, 1e-6);
    auto qkv = at::linear(y, b.qkv_weight, b.qkv_bias).view({n, 3, -1, D});
    auto q = qkv.select(1, 0).to(at::kFloat), k = qkv.select(1, 1).to(at::kFloat);
    q = (q * cos + rotate_half(q) * sin).to(dtype).transpose(0, 1);  // [heads, n, D]
    k = (k * cos + rotate_half(k) * sin).to(dtype).transpose(0, 1);
    auto v = qkv.select(1, 2).transpose(0, 1);
    const int64_t heads = q.size(0);
    at::Tensor a;
    if (t == 1) {
      a = full_attention(q, k, v);
    } else {  // each frame attends within itself
      std::vector<at::Tensor> parts;
      for (int64_t f = 0; f < t; ++f)
        parts.push_back(full_attention(q.narrow(1, f * frame, frame), k.narrow(1, f * frame, frame),
                                       v.narrow(1, f * frame, frame)));
      a = at::cat(parts, 1);
    }
    a = at::linear(a.transpose(0, 1).reshape({n, heads * D}), b.proj_weight);
    tp.all_reduce_sum(a);
    x = x + (a + b.proj_bias);
    y = at::layer_norm(x, {W}, b.norm2_weight, b.norm2_bias, 1e-6);
    auto h = at::gelu(at::linear(y, b.fc1_weight, b.fc1_bias), "tanh");
    auto f = at::linear(h, b.fc2_weight);
    tp.all_reduce_sum(f);
    x = x + (f + b.fc2_bias);
    const auto& ds = c.deepstack_visual_indexes;
    for (size_t j = 0; j < ds.size(); ++j) {
      if (ds[j] == static_cast<int64_t>(li))
        out.deepstack.push_back(merge(x, w.deepstack[j], c.merged_width(), true));
    }
  }
  out.embeds = merge(x, w.merger, c.merged_width(), false);
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> VisionTower::named() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  declare_vision_parameters(config_, weights_, [&](const VisionParameter& p, const at::Tensor& t) {
    if (t.defined()) out.emplace_back(p.name, t);
  });
  return out;
}

}  // namespace h3::text
