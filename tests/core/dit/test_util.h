// Shared helpers of the DiT tests: test data paths, safetensors reading, tolerances.
#pragma once

#include <ATen/ATen.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "dit/consistency_sampler.h"
#include "dit/packed_sequence.h"
#include "io/safetensors.h"

namespace h3::dit::testing {

inline std::string data_dir() {
  const char* d = std::getenv("H3_TEST_DATA");
  return d ? d : "tests/data";
}
inline std::string golden_dir() {
  return data_dir() + "/golden/h3_dit";
}

// Every tensor of a safetensors file, copied out of the mapping.
inline std::map<std::string, at::Tensor> read_tensors(const std::string& path) {
  auto f = io::SafetensorsFile::open(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& info : f->tensors()) out[info.name] = f->view(info.name).clone();
  return out;
}

// A golden forward case's inputs (case_*.safetensors of the reference run).
inline DitInputs case_inputs(const std::map<std::string, at::Tensor>& c) {
  DitInputs in;
  in.text = c.at("text");
  in.video = c.at("video");
  in.audio = c.at("audio");
  in.t_video = c.at("t_video").item<float>();
  in.t_audio = c.at("t_audio").item<float>();
  return in;
}

// Every chunk a causal request gives on `model`, in order: each chunk's video, then its audio rows.
inline std::vector<at::Tensor> causal_outputs(const Transformer& model, const CausalRequest& r) {
  CausalSampler s(model, r);
  std::vector<at::Tensor> out;
  while (!s.done()) {
    auto c = s.next();
    out.push_back(c.video);
    out.push_back(c.audio);
  }
  return out;
}

inline double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

}  // namespace h3::dit::testing
