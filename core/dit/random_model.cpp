#include "dit/random_model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "dit/parameters.h"
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

}  // namespace h3::dit
