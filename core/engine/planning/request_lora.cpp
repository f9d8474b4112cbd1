#include "engine/planning/request_lora.h"

#include <filesystem>

#include "h3/limits.h"

namespace h3 {

std::string model_causal_lora(const std::string& model_dir) {
  const std::filesystem::path folder = std::filesystem::path(model_dir) / "causal-lora";
  std::error_code ec;
  return std::filesystem::is_regular_file(folder / "adapter_model.safetensors", ec) ? folder.string() : "";
}

std::string request_lora(const ModelInfo& m, const GenerationRequest& req) {
  if (req.lora == kNoLora) return "";
  if (!req.lora.empty()) return req.lora;
  // The model's own adapter was trained for the places an endless stream's late chunks run at; a
  // clip's chunks sit where the DiT itself was trained, and the adapter made one of the default's
  // 48-frame clips worse (docs/causal.md, "The default's causal adapter"), so a clip runs bare.
  return req.sampler == Sampler::kCausal && req.num_frames == kEndless ? model_causal_lora(m.dir) : "";
}

}  // namespace h3
