#include "text/random_encoder.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "h3/error.h"
#include "io/safetensors.h"
#include "text/encoder_parameters.h"
#include "text/vision_parameters.h"

namespace h3::text {

namespace {

std::string config_with_vision(const EncoderConfig& c, const VisionConfig& v) {
  nlohmann::json j = nlohmann::json::parse(c.to_json());
  j["vision_config"] = {
      {"model_type", "qwen3_vl_vision"},
      {"depth", v.depth},
      {"hidden_size", v.hidden_size},
      {"num_heads", v.num_heads},
      {"intermediate_size", v.intermediate_size},
      {"in_channels", v.in_channels},
      {"patch_size", v.patch_size},
      {"temporal_patch_size", v.temporal_patch_size},
      {"spatial_merge_size", v.spatial_merge_size},
      {"out_hidden_size", v.out_hidden_size},
      {"num_position_embeddings", v.num_position_embeddings},
      {"deepstack_visual_indexes", v.deepstack_visual_indexes},
      {"hidden_act", v.hidden_act},
  };
  j["image_token_id"] = v.image_token_id;
  j["vision_start_token_id"] = v.vision_start_token_id;
  j["vision_end_token_id"] = v.vision_end_token_id;
  return j.dump(2) + "\n";
}

void add_random_vision(const VisionConfig& v, at::Generator& gen,
                       std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  for (const VisionParameter& p : vision_parameters(v)) {
    auto t = at::randn(p.shape, gen, at::TensorOptions().dtype(at::kFloat));
    const bool bias = p.name.size() > 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0;
    if (p.name.find("pos_embed") != std::string::npos) {
      t.mul_(0.25);
    } else if (bias) {
      t.mul_(0.01);
    } else if (p.shape.size() == 1) {
      t.mul_(0.01).add_(1.0);
    } else {
      int64_t fan_in = 1;
      for (size_t d = 1; d < p.shape.size(); ++d) fan_in *= p.shape[d];
      t.mul_(1.0 / std::sqrt(static_cast<double>(fan_in)));
    }
    tensors.emplace_back(p.name, t);
  }
}

}  // namespace

void write_random_encoder(const std::string& dir, const EncoderConfig& c, uint64_t seed,
                          const VisionConfig* vision) {
  c.validate(dir + "/config.json");
  if (vision) {
    vision->validate(dir + "/config.json");
    if (vision->out_hidden_size != c.hidden_size) {
      throw Error(ErrorKind::kInvalidArgument,
                  dir + ": the vision tower's out_hidden_size must be the encoder's width");
    }
  }
  std::filesystem::create_directories(dir);
  {
    std::ofstream cfg(dir + "/config.json");
    if (!cfg || !(cfg << (vision ? config_with_vision(c, *vision) : c.to_json()))) {
      throw Error(ErrorKind::kNotFound, dir + "/config.json: cannot write");
    }
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto params = encoder_parameters(c, c.num_layers);
  params.push_back(final_norm_parameter(c));
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& p : params) {
    auto t = at::randn(p.shape, gen, at::TensorOptions().dtype(at::kFloat));
    if (p.shape.size() == 1) {
      t.mul_(0.1).add_(1.0);
    } else if (p.name.find("embed_tokens") == std::string::npos) {
      t.mul_(0.5 / std::sqrt(static_cast<double>(p.shape[1])));
    }
    tensors.emplace_back(p.name, t.to(at::kBFloat16));
  }
  if (vision) add_random_vision(*vision, gen, tensors);
  io::write_safetensors(dir + "/model.safetensors", tensors);
}

}  // namespace h3::text
