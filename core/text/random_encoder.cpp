#include "text/random_encoder.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "io/safetensors.h"
#include "text/encoder_parameters.h"

namespace h3::text {

void write_random_encoder(const std::string& dir, const EncoderConfig& c, uint64_t seed) {
  c.validate(dir + "/config.json");
  std::filesystem::create_directories(dir);
  {
    std::ofstream cfg(dir + "/config.json");
    if (!cfg || !(cfg << c.to_json())) throw Error(ErrorKind::kNotFound, dir + "/config.json: cannot write");
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
  io::write_safetensors(dir + "/model.safetensors", tensors);
}

}  // namespace h3::text
