#pragma once

#include <cstdlib>
#include <filesystem>

#include "h3/request.h"

namespace h3::test {

struct GoldenRun {
  std::string model_dir, embeds_path, expected_path;
  GenerationRequest request;
};

// A model folder made of the golden tiny transformer and tiny VAE (the release's model_index.json
// and scheduler configs), and the golden run's request.
inline GoldenRun make_golden_model(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string data = std::getenv("H3_TEST_DATA");
  const fs::path root = fs::path(dir) / "model";
  fs::create_directories(root);
  fs::copy(data + "/golden/h3_dit/transformer_tiny", root / "transformer", fs::copy_options::recursive);
  fs::copy(data + "/golden/h3_vae/diffusers", root / "vae", fs::copy_options::recursive);
  fs::copy_file(data + "/h3-release/model_index.json", root / "model_index.json");
  fs::copy(data + "/h3-release/scheduler", root / "scheduler", fs::copy_options::recursive);
  fs::copy(data + "/h3-release/audio_scheduler", root / "audio_scheduler", fs::copy_options::recursive);
  GoldenRun g;
  g.model_dir = root.string();
  g.embeds_path = data + "/golden/h3_dit/gen_tiny_124f_96x64_n4.embeds.safetensors";
  g.expected_path = data + "/golden/h3_dit/gen_tiny_124f_96x64_n4.expected.safetensors";
  g.request.embeds_path = g.embeds_path;
  g.request.width = 96;
  g.request.height = 64;
  g.request.num_frames = 124;
  g.request.steps = 4;
  g.request.seed = 42;
  return g;
}

}  // namespace h3::test
