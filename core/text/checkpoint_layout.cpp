#include "text/checkpoint_layout.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "h3/error.h"

namespace h3::text {
namespace {

using json = nlohmann::json;

int64_t number(const json& vision, const char* key, const std::string& origin) {
  if (!vision.contains(key) || !vision[key].is_number_integer() || vision[key].get<int64_t>() < 1) {
    throw Error(ErrorKind::kFormat, origin + ": vision_config." + key +
                                        " must be a positive integer (the vision tower's tensors " +
                                        "are derived from it)");
  }
  return vision[key].get<int64_t>();
}

// The vision tower of Qwen3VLForConditionalGeneration: patch embedding, learned position table,
// `depth` pre-norm blocks (fused qkv, GELU MLP), the patch merger into the language model's width
// and one more merger per deepstack layer (those norm the merged 2x2 patches, hence their width).
void add_vision_tower(const json& v, const std::string& origin, std::vector<EncoderParameter>& out) {
  const std::string p = "model.visual.";
  const int64_t W = number(v, "hidden_size", origin), F = number(v, "intermediate_size", origin);
  const int64_t patch = number(v, "patch_size", origin), tp = number(v, "temporal_patch_size", origin);
  const int64_t merge = number(v, "spatial_merge_size", origin), out_w = number(v, "out_hidden_size", origin);
  const int64_t merged = W * merge * merge;
  out.push_back({p + "patch_embed.proj.weight", {W, number(v, "in_channels", origin), tp, patch, patch}});
  out.push_back({p + "patch_embed.proj.bias", {W}});
  out.push_back({p + "pos_embed.weight", {number(v, "num_position_embeddings", origin), W}});
  for (int64_t i = 0; i < number(v, "depth", origin); ++i) {
    const std::string b = p + "blocks." + std::to_string(i) + ".";
    out.push_back({b + "attn.proj.bias", {W}});
    out.push_back({b + "attn.proj.weight", {W, W}});
    out.push_back({b + "attn.qkv.bias", {3 * W}});
    out.push_back({b + "attn.qkv.weight", {3 * W, W}});
    out.push_back({b + "mlp.linear_fc1.bias", {F}});
    out.push_back({b + "mlp.linear_fc1.weight", {F, W}});
    out.push_back({b + "mlp.linear_fc2.bias", {W}});
    out.push_back({b + "mlp.linear_fc2.weight", {W, F}});
    out.push_back({b + "norm1.bias", {W}});
    out.push_back({b + "norm1.weight", {W}});
    out.push_back({b + "norm2.bias", {W}});
    out.push_back({b + "norm2.weight", {W}});
  }
  auto merger = [&](const std::string& m, int64_t norm_width) {
    out.push_back({m + "linear_fc1.bias", {merged}});
    out.push_back({m + "linear_fc1.weight", {merged, merged}});
    out.push_back({m + "linear_fc2.bias", {out_w}});
    out.push_back({m + "linear_fc2.weight", {out_w, merged}});
    out.push_back({m + "norm.bias", {norm_width}});
    out.push_back({m + "norm.weight", {norm_width}});
  };
  merger(p + "merger.", W);
  const json& deep = v.contains("deepstack_visual_indexes") ? v["deepstack_visual_indexes"] : json::array();
  for (size_t j = 0; j < deep.size(); ++j)
    merger(p + "deepstack_merger_list." + std::to_string(j) + ".", merged);
}

}  // namespace

std::vector<EncoderParameter> checkpoint_parameters(const std::string& config_path) {
  const EncoderConfig c = EncoderConfig::load(config_path);
  std::vector<EncoderParameter> out = encoder_parameters(c, c.num_layers);
  out.push_back(final_norm_parameter(c));
  out.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}});  // untied in the release
  const std::filesystem::path file = std::filesystem::is_directory(config_path)
                                         ? std::filesystem::path(config_path) / "config.json"
                                         : std::filesystem::path(config_path);
  std::ifstream in(file);
  const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("vision_config") || !j["vision_config"].is_object()) {
    throw Error(ErrorKind::kFormat,
                file.string() + ": no vision_config (a whole Qwen3-VL checkpoint has one)");
  }
  add_vision_tower(j["vision_config"], file.string(), out);
  return out;
}

}  // namespace h3::text
