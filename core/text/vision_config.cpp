#include "text/vision_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "h3/error.h"
#include "io/config_json.h"

namespace h3::text {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

int64_t token_id(const json& root, const char* key, int64_t fallback, const std::string& origin) {
  if (!root.contains(key)) return fallback;
  if (!root[key].is_number_integer() || root[key].get<int64_t>() < 0) {
    throw Error(ErrorKind::kFormat, origin + ": " + key + " must be a token id (a non-negative integer)");
  }
  return root[key].get<int64_t>();
}

}  // namespace

int64_t VisionConfig::position_side() const {
  auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(num_position_embeddings))));
  return side;
}

void VisionConfig::validate(const std::string& origin) const {
  auto fail = [&](const std::string& what) {
    throw Error(ErrorKind::kFormat, origin + ": vision_config." + what);
  };
  if (hidden_size % num_heads != 0) {
    fail("hidden_size " + std::to_string(hidden_size) + " is not a multiple of num_heads " +
         std::to_string(num_heads));
  }
  if (head_dim() % 4 != 0) fail("hidden_size / num_heads must be a multiple of 4 (2-D rotary embedding)");
  if (position_side() * position_side() != num_position_embeddings) {
    fail("num_position_embeddings " + std::to_string(num_position_embeddings) +
         " is not a square (the learned position table is side x side)");
  }
  for (int64_t i : deepstack_visual_indexes) {
    if (i < 0 || i >= depth) {
      fail("deepstack_visual_indexes holds " + std::to_string(i) + ", outside the blocks 0.." +
           std::to_string(depth - 1));
    }
  }
  if (hidden_act != "gelu_pytorch_tanh") {
    fail("hidden_act '" + hidden_act + "' is not Qwen3-VL's gelu_pytorch_tanh");
  }
}

void VisionConfig::check_tp(int tp, const std::string& origin) const {
  if (tp < 1 || num_heads % tp != 0 || intermediate_size % tp != 0) {
    throw Error(ErrorKind::kInvalidArgument, origin + ": " + std::to_string(tp) +
                                                 " tensor-parallel ranks cannot split the vision tower (" +
                                                 std::to_string(num_heads) + " heads, MLP width " +
                                                 std::to_string(intermediate_size) +
                                                 "): use a rank count that divides both");
  }
}

VisionConfig VisionConfig::parse(const std::string& text, const std::string& origin) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::kFormat, origin + ": not valid JSON: " + e.what());
  }
  if (!root.is_object() || !root.contains("vision_config") || !root["vision_config"].is_object()) {
    throw Error(ErrorKind::kFormat, origin + ": no vision_config (the text encoder has no vision tower)");
  }
  const json& v = root["vision_config"];
  VisionConfig c;
  c.depth = io::positive_int(v, "depth", origin + ": vision_config.");
  c.hidden_size = io::positive_int(v, "hidden_size", origin + ": vision_config.");
  c.num_heads = io::positive_int(v, "num_heads", origin + ": vision_config.");
  c.intermediate_size = io::positive_int(v, "intermediate_size", origin + ": vision_config.");
  c.in_channels =
      v.contains("in_channels") ? io::positive_int(v, "in_channels", origin + ": vision_config.") : 3;
  c.patch_size = io::positive_int(v, "patch_size", origin + ": vision_config.");
  c.temporal_patch_size = io::positive_int(v, "temporal_patch_size", origin + ": vision_config.");
  c.spatial_merge_size = io::positive_int(v, "spatial_merge_size", origin + ": vision_config.");
  c.out_hidden_size = io::positive_int(v, "out_hidden_size", origin + ": vision_config.");
  c.num_position_embeddings = io::positive_int(v, "num_position_embeddings", origin + ": vision_config.");
  if (v.contains("deepstack_visual_indexes")) {
    if (!v["deepstack_visual_indexes"].is_array())
      throw Error(ErrorKind::kFormat, origin + ": vision_config.deepstack_visual_indexes must be a list");
    for (const auto& i : v["deepstack_visual_indexes"]) {
      if (!i.is_number_integer())
        throw Error(ErrorKind::kFormat,
                    origin + ": vision_config.deepstack_visual_indexes must hold integers");
      c.deepstack_visual_indexes.push_back(i.get<int64_t>());
    }
  }
  if (v.contains("hidden_act") && v["hidden_act"].is_string())
    c.hidden_act = v["hidden_act"].get<std::string>();
  // transformers 5 writes rope_parameters.rope_theta; the release (4.57) writes none: 10000.
  if (v.contains("rope_parameters") && v["rope_parameters"].is_object() &&
      v["rope_parameters"].contains("rope_theta") && v["rope_parameters"]["rope_theta"].is_number()) {
    c.rope_theta = v["rope_parameters"]["rope_theta"].get<double>();
  }
  c.image_token_id = token_id(root, "image_token_id", c.image_token_id, origin);
  c.video_token_id = token_id(root, "video_token_id", c.video_token_id, origin);
  c.vision_start_token_id = token_id(root, "vision_start_token_id", c.vision_start_token_id, origin);
  c.vision_end_token_id = token_id(root, "vision_end_token_id", c.vision_end_token_id, origin);
  c.validate(origin);
  return c;
}

VisionConfig VisionConfig::load(const std::string& path) {
  fs::path p(path);
  if (fs::is_directory(p) || p.extension() != ".json") p /= "config.json";
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    throw Error(ErrorKind::kNotFound,
                p.string() + ": missing (the text encoder's config; the release keeps it in text_encoder/)");
  }
  std::ostringstream s;
  s << in.rdbuf();
  return parse(s.str(), p.string());
}

std::array<int64_t, 2> smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                    int64_t max_pixels) {
  const double h = static_cast<double>(height), w = static_cast<double>(width),
               f = static_cast<double>(factor);
  if (std::max(h, w) / std::min(h, w) > 200) {
    throw Error(
        ErrorKind::kInvalidArgument,
        "image of " + std::to_string(height) + " x " + std::to_string(width) +
            " pixels: the aspect ratio must be under 200 (Qwen3-VL's image processor); crop or pad it");
  }
  // Python's round(): halves to even (std::nearbyint in the default rounding mode).
  int64_t hb = static_cast<int64_t>(std::nearbyint(h / f)) * factor;
  int64_t wb = static_cast<int64_t>(std::nearbyint(w / f)) * factor;
  if (hb * wb > max_pixels) {
    const double beta = std::sqrt(h * w / static_cast<double>(max_pixels));
    hb = std::max(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    wb = std::max(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (hb * wb < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
    hb = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    wb = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return {hb, wb};
}

std::array<int64_t, 2> smart_resize_video(int64_t frames, int64_t height, int64_t width, int64_t factor,
                                          int64_t temporal_factor, int64_t min_pixels, int64_t max_pixels) {
  if (frames < temporal_factor) {
    throw Error(ErrorKind::kInvalidArgument, "a video of " + std::to_string(frames) +
                                                 " frames: Qwen3-VL's video processor needs at least " +
                                                 std::to_string(temporal_factor));
  }
  double h = static_cast<double>(height), w = static_cast<double>(width);
  const double f = static_cast<double>(factor), t = static_cast<double>(frames);
  if (height < factor || width < factor) {  // scaled up to a factor a side first (truncated)
    const double scale = std::max(f / h, f / w);
    h = std::trunc(h * scale);
    w = std::trunc(w * scale);
  }
  if (std::max(h, w) / std::min(h, w) > 200) {
    throw Error(ErrorKind::kInvalidArgument,
                "video of " + std::to_string(height) + " x " + std::to_string(width) +
                    " pixels: the aspect ratio must be under 200 (Qwen3-VL's video "
                    "processor); crop it");
  }
  int64_t hb = static_cast<int64_t>(std::nearbyint(h / f)) * factor;
  int64_t wb = static_cast<int64_t>(std::nearbyint(w / f)) * factor;
  const int64_t tb =
      static_cast<int64_t>(std::nearbyint(t / static_cast<double>(temporal_factor))) * temporal_factor;
  if (tb * hb * wb > max_pixels) {
    const double beta = std::sqrt(t * h * w / static_cast<double>(max_pixels));
    hb = std::max(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    wb = std::max(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (tb * hb * wb < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (t * h * w));
    hb = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    wb = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return {hb, wb};
}

}  // namespace h3::text
