#include "dit/random_model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "dit/parameters.h"
#include "h3/error.h"
#include "io/safetensors.h"

namespace h3::dit {

void write_random_transformer(const std::string& dir, const DitConfig& config, uint64_t seed) {
  config.validate(dir + "/config.json");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream cfg(dir + "/config.json");
  if (!cfg || !(cfg << config.to_json() << "\n")) {
    throw Error(ErrorKind::kNotFound, dir + "/config.json: cannot write the config");
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& spec : dit_parameters(config)) {
    auto t = at::randn(spec.shape, gen, at::TensorOptions().dtype(at::kFloat));
    const auto& n = spec.name;
    auto ends = [&](const char* s) {
      const std::string e(s);
      return n.size() >= e.size() && n.compare(n.size() - e.size(), e.size(), e) == 0;
    };
    if (spec.shape.size() == 1 && !ends(".bias")) {
      t = t.mul_(0.1).add_(1.0);  // norm weights near 1
    } else if (ends(".bias")) {
      t.mul_(0.02);
    } else if (spec.adaln) {
      t.mul_(0.5 / std::sqrt(static_cast<double>(spec.shape[1])));  // modulation of order 0.5
    } else {
      t.mul_(1.0 / std::sqrt(static_cast<double>(spec.shape[1])));  // unit-variance outputs
    }
    tensors.emplace_back(n, t);
  }
  io::write_safetensors(dir + "/diffusion_pytorch_model.safetensors", tensors);
}

void write_random_lora(const std::string& dir, const DitConfig& c, int64_t rank, double alpha,
                       uint64_t seed) {
  const int64_t h = c.hidden_size, inner = c.inner_dim();
  std::vector<std::pair<std::string, std::vector<int64_t>>> targets{
      {"video_patch_proj", {h, c.video_row_width()}},
      {"audio_patch_proj", {h, c.audio_in_channels}},
      {"condition_proj", {h, c.text_dim}},
      {"time_embedder.proj_in", {c.time_embed_hidden_dim, c.freq_dim}},
      {"time_embedder.proj_out", {c.time_embed_dim, c.time_embed_hidden_dim}},
  };
  auto block = [&](const std::string& p, bool adaln) {
    targets.push_back({p + "attn.qkv_proj", {3 * inner, h}});
    targets.push_back({p + "attn.out_proj", {h, inner}});
    targets.push_back({p + "mlp.fc1", {2 * c.ffn_dim, h}});
    targets.push_back({p + "mlp.fc2", {h, c.ffn_dim}});
    if (adaln) targets.push_back({p + "adaln_proj.linear", {c.adaln_width(), c.time_embed_dim}});
  };
  for (int64_t i = 0; i < c.num_refiner_layers; ++i)
    block("token_refiner.blocks." + std::to_string(i) + ".", false);
  for (int64_t i = 0; i < c.num_layers; ++i) block("blocks." + std::to_string(i) + ".", true);
  targets.push_back({"final_layer.adaln_proj.linear", {c.final_adaln_width(), c.time_embed_dim}});
  targets.push_back({"final_layer.video_out", {c.video_row_width(), h}});
  targets.push_back({"final_layer.audio_out", {c.audio_in_channels, h}});

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::string modules;
  for (const auto& [name, shape] : targets) {
    const std::string key = "base_model.model.dit." + name;
    tensors.emplace_back(
        key + ".lora_A.weight",
        at::randn({rank, shape[1]}, gen, f32).div_(std::sqrt(static_cast<double>(shape[1]))));
    tensors.emplace_back(key + ".lora_B.weight", at::randn({shape[0], rank}, gen, f32).mul_(0.05));
    modules += std::string(modules.empty() ? "" : ", ") + "\"" + name + "\"";
  }
  io::write_safetensors(dir + "/adapter_model.safetensors", tensors);
  std::ofstream cfg(dir + "/adapter_config.json");
  if (!cfg || !(cfg << "{\"peft_type\": \"LORA\", \"r\": " << rank << ", \"lora_alpha\": " << alpha
                    << ", \"target_modules\": [" << modules << "]}\n")) {
    throw Error(ErrorKind::kNotFound, dir + "/adapter_config.json: cannot write the config");
  }
}

}  // namespace h3::dit
