#include "engine/planning/request_lora.h"

#include <filesystem>

namespace h3 {

std::string model_causal_lora(const std::string& model_dir) {
  const std::filesystem::path folder = std::filesystem::path(model_dir) / "causal-lora";
  std::error_code ec;
  return std::filesystem::is_regular_file(folder / "adapter_model.safetensors", ec) ? folder.string() : "";
}

std::string request_lora(const ModelInfo& m, const GenerationRequest& req) {
  if (req.lora == kNoLora) return "";
  if (!req.lora.empty()) return req.lora;
  return req.sampler == Sampler::kCausal ? model_causal_lora(m.dir) : "";
}

}  // namespace h3
