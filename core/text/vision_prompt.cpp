#include "text/vision_prompt.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>

#include "h3/error.h"

namespace h3::text {

at::Tensor multimodal_positions(const std::vector<int64_t>& ids, int64_t image_token_id,
                                const std::vector<std::array<int64_t, 3>>& grids, int64_t merge) {
  return multimodal_positions(ids, image_token_id, image_token_id, grids, merge);
}

at::Tensor multimodal_positions(const std::vector<int64_t>& ids, int64_t image_token_id,
                                int64_t video_token_id, const std::vector<std::array<int64_t, 3>>& grids,
                                int64_t merge) {
  const int64_t L = static_cast<int64_t>(ids.size());
  auto out = at::empty({3, L}, at::TensorOptions().dtype(at::kLong));
  auto a = out.accessor<int64_t, 2>();
  int64_t pos = 0;
  size_t next_grid = 0;
  for (int64_t i = 0; i < L;) {
    const int64_t pad = ids[i];
    if (pad != image_token_id && pad != video_token_id) {
      for (int k = 0; k < 3; ++k) a[k][i] = pos;
      ++pos, ++i;
      continue;
    }
    if (next_grid >= grids.size()) {
      throw Error(ErrorKind::kInvalidArgument,
                  "multimodal positions: more runs of image tokens than images (" +
                      std::to_string(grids.size()) + ")");
    }
    const auto& g = grids[next_grid++];
    const int64_t t = g[0], h = g[1] / merge, w = g[2] / merge, n = t * h * w;
    int64_t run = 0;
    while (i + run < L && ids[i + run] == pad) ++run;
    if (run != n) {
      throw Error(ErrorKind::kInvalidArgument, "multimodal positions: a run of " + std::to_string(run) +
                                                   " image tokens for an image of " + std::to_string(n) +
                                                   " merged tokens");
    }
    for (int64_t f = 0, j = i; f < t; ++f)
      for (int64_t r = 0; r < h; ++r)
        for (int64_t col = 0; col < w; ++col, ++j) {
          a[0][j] = pos + f;
          a[1][j] = pos + r;
          a[2][j] = pos + col;
        }
    pos += std::max(h, w);
    i += run;
  }
  if (next_grid != grids.size()) {
    throw Error(ErrorKind::kInvalidArgument, "multimodal positions: " + std::to_string(grids.size()) +
                                                 " images but " + std::to_string(next_grid) +
                                                 " runs of image tokens");
  }
  return out;
}

VisionPrompt present_images_ids(const std::vector<std::vector<int64_t>>& labels,
                                const std::vector<int64_t>& prompt, const VisionConfig& c,
                                const std::vector<std::array<int64_t, 3>>& grids) {
  if (labels.size() != grids.size()) {
    throw Error(ErrorKind::kInvalidArgument, "image presentation: " + std::to_string(labels.size()) +
                                                 " labels for " + std::to_string(grids.size()) + " images");
  }
  const int64_t m = c.spatial_merge_size;
  VisionPrompt out;
  std::vector<int64_t> tags;
  auto text = [&](const std::vector<int64_t>& ids) {
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    tags.insert(tags.end(), ids.size(), 1);
  };
  for (size_t i = 0; i < grids.size(); ++i) {
    const auto& grid = grids[i];
    const int64_t n = grid[0] * (grid[1] / m) * (grid[2] / m);
    text(labels[i]);
    out.ids.push_back(c.vision_start_token_id);
    out.ids.insert(out.ids.end(), static_cast<size_t>(n), c.image_token_id);
    out.ids.push_back(c.vision_end_token_id);
    tags.insert(tags.end(), static_cast<size_t>(n + 2), 0);
  }
  text(prompt);
  out.positions = multimodal_positions(out.ids, c.image_token_id, grids, m);
  out.image_mask = at::tensor(out.ids, at::TensorOptions().dtype(at::kLong)).eq(c.image_token_id);
  out.tags = at::tensor(tags, at::TensorOptions().dtype(at::kLong));
  return out;
}

VisionPrompt present_image_ids(const std::vector<int64_t>& label, const std::vector<int64_t>& prompt,
                               const VisionConfig& c, const std::array<int64_t, 3>& grid) {
  return present_images_ids({label}, prompt, c, {grid});
}

std::string picture_label(size_t index) {
  return "<Picture " + std::to_string(index + 1) + ">: ";
}

VisionPrompt present_images(const Tokenizer& tokenizer, const std::string& prompt, const VisionConfig& c,
                            const std::vector<std::array<int64_t, 3>>& grids) {
  std::vector<std::vector<int64_t>> labels;
  for (size_t i = 0; i < grids.size(); ++i)
    labels.push_back(tokenizer.encode(picture_label(i), "picture label"));
  return present_images_ids(labels, tokenizer.encode(prompt), c, grids);
}

VisionPrompt present_image(const Tokenizer& tokenizer, const std::string& prompt, const VisionConfig& c,
                           const std::array<int64_t, 3>& grid) {
  return present_images(tokenizer, prompt, c, {grid});
}

std::string seconds_label(double t) {
  // printf rounds the binary value exactly, halves to even, as Python's format does.
  char buf[64];
  std::snprintf(buf, sizeof buf, "<%.1f seconds>", t);
  return buf;
}

std::string video_label(size_t index) {
  return "<Video " + std::to_string(index + 1) + ">: ";
}

VisionPrompt present_references(const Tokenizer& tokenizer, const std::string& prompt, const VisionConfig& c,
                                const std::vector<PresentedReference>& references) {
  const int64_t m = c.spatial_merge_size;
  VisionPrompt out;
  std::vector<int64_t> tags;
  std::vector<std::array<int64_t, 3>> runs;  // one grid per run of pads, as Qwen3-VL places them
  auto text = [&](const std::string& s) {
    const std::vector<int64_t> ids = tokenizer.encode(s, "reference label");
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    tags.insert(tags.end(), ids.size(), 1);
  };
  auto block = [&](int64_t pad, int64_t h, int64_t w) {
    const int64_t n = (h / m) * (w / m);
    out.ids.push_back(c.vision_start_token_id);
    out.ids.insert(out.ids.end(), static_cast<size_t>(n), pad);
    out.ids.push_back(c.vision_end_token_id);
    tags.insert(tags.end(), static_cast<size_t>(n + 2), 0);
    runs.push_back({1, h, w});
  };
  size_t pictures = 0, videos = 0, sounds = 0;
  for (const PresentedReference& r : references) {
    if (r.sound || r.audio_only) text("<Audio " + std::to_string(++sounds) + ">: ");
    if (r.audio_only) continue;
    if (!r.video) {
      text(picture_label(pictures++));
      block(c.image_token_id, r.grid[1], r.grid[2]);
      continue;
    }
    if (r.block_seconds.size() != static_cast<size_t>(r.grid[0])) {
      throw Error(ErrorKind::kInvalidArgument, "reference presentation: a video of " +
                                                   std::to_string(r.grid[0]) + " vision blocks with " +
                                                   std::to_string(r.block_seconds.size()) + " block times");
    }
    // Each merged frame pair is a block of its own, labelled with its time.
    text(video_label(videos++));
    for (double t : r.block_seconds) {
      text(seconds_label(t));
      block(c.video_token_id, r.grid[1], r.grid[2]);
    }
  }
  const std::vector<int64_t> p = tokenizer.encode(prompt);
  out.ids.insert(out.ids.end(), p.begin(), p.end());
  tags.insert(tags.end(), p.size(), 1);
  out.positions = multimodal_positions(out.ids, c.image_token_id, c.video_token_id, runs, m);
  const auto ids = at::tensor(out.ids, at::TensorOptions().dtype(at::kLong));
  out.image_mask = ids.eq(c.image_token_id).logical_or(ids.eq(c.video_token_id));
  out.tags = at::tensor(tags, at::TensorOptions().dtype(at::kLong));
  return out;
}

Conditioning encode_with_images(const TextEncoder& encoder, const VisionPrompt& prompt,
                                const std::vector<VisionFeatures>& images) {
  if (images.empty()) throw Error(ErrorKind::kInvalidArgument, "encode_with_images: no images");
  std::vector<at::Tensor> embeds;
  std::vector<std::vector<at::Tensor>> deep(images.front().deepstack.size());
  for (const VisionFeatures& f : images) {
    embeds.push_back(f.embeds);
    if (f.deepstack.size() != deep.size()) {
      throw Error(ErrorKind::kInvalidArgument, "encode_with_images: images with different deepstack depths");
    }
    for (size_t k = 0; k < deep.size(); ++k) deep[k].push_back(f.deepstack[k]);
  }
  VisualRows rows{prompt.image_mask, at::cat(embeds), {}};
  for (auto& d : deep) rows.deepstack.push_back(at::cat(d));
  auto ids = at::tensor(prompt.ids, at::TensorOptions().dtype(at::kLong));
  Conditioning out;
  out.embeds = encoder.forward(ids, prompt.positions, rows).to(at::kCPU, at::kFloat).contiguous();
  out.tags = prompt.tags.clone();
  return out;
}

Conditioning encode_with_image(const TextEncoder& encoder, const VisionPrompt& prompt,
                               const VisionFeatures& image) {
  return encode_with_images(encoder, prompt, {image});
}

}  // namespace h3::text
