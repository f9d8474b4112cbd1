// Shared helpers of the DiT tests: test data paths, safetensors reading, tolerances.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace h3::dit::testing {

inline std::string data_dir() {
  const char* d = std::getenv("H3_TEST_DATA");
  return d ? d : "tests/data";
}
inline std::string golden_dir() {
  return data_dir() + "/golden/h3_dit";
}

// TEMPORARY until core/io is merged: reads the F32 tensors of a safetensors file.
inline std::map<std::string, at::Tensor> read_tensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  auto j = nlohmann::json::parse(header);
  std::map<std::string, at::Tensor> out;
  for (auto& [name, info] : j.items()) {
    if (name == "__metadata__") continue;
    if (info["dtype"] != "F32") throw std::runtime_error("only F32 here: " + name);
    std::vector<int64_t> shape = info["shape"].get<std::vector<int64_t>>();
    auto off = info["data_offsets"].get<std::vector<uint64_t>>();
    auto t = at::empty(shape, at::kFloat);
    in.seekg(static_cast<std::streamoff>(8 + n + off[0]));
    in.read(reinterpret_cast<char*>(t.data_ptr<float>()), static_cast<std::streamsize>(off[1] - off[0]));
    out[name] = t;
  }
  return out;
}

inline double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

}  // namespace h3::dit::testing
