// Shared helpers of the DiT tests: test data paths, safetensors reading, tolerances.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dist/world.h"
#include "dit/consistency_sampler.h"
#include "dit/packed_sequence.h"
#include "dit/transformer.h"
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

// A condition-block case (FL2VA keyframes, Ref2VA references): its inputs and the reference's
// velocities of the generated rows.
struct VelocityCase {
  std::string name;
  DitInputs inputs;
  at::Tensor video, audio;
};

// The tiny golden transformer at TP 2 (one head each) and at SP 2 (the rows split, condition rows
// included) on two thread ranks: every rank's velocities within `tolerance` of the reference's.
inline void expect_velocities_at_two_ranks(const std::vector<VelocityCase>& cases, double tolerance) {
  for (int sp : {1, 2}) {
    std::vector<std::vector<Velocity>> got(2);
    auto results = dist::run_threads(2, [&](dist::Group& g) {
      at::set_num_threads(1);
      TransformerOptions o;
      o.sp = sp;
      const auto m = Transformer::load(golden_dir() + "/transformer_tiny", &g, o);
      for (const auto& c : cases) got[static_cast<size_t>(g.rank())].push_back(m.forward(c.inputs));
    });
    for (const auto& r : results) ASSERT_TRUE(r.ok) << "sp " << sp << " rank " << r.rank << ": " << r.error;
    for (size_t r = 0; r < 2; ++r) {
      for (size_t i = 0; i < cases.size(); ++i) {
        EXPECT_LE(max_abs_diff(got[r][i].video, cases[i].video), tolerance)
            << cases[i].name << " sp " << sp << " rank " << r;
        EXPECT_LE(max_abs_diff(got[r][i].audio, cases[i].audio), tolerance)
            << cases[i].name << " sp " << sp << " rank " << r;
      }
    }
  }
}

// --- The chunk-causal reference cases (tests/data/causal, README there) ---------------------------

inline std::string causal_dir() {
  return data_dir() + "/causal";
}

// The tiny golden transformer with the reference's random LoRA (tests/data/causal/lora).
inline Transformer tiny_with_lora(dist::Group* g = nullptr) {
  auto m = Transformer::load(golden_dir() + "/transformer_tiny", g);
  m.attach_lora(causal_dir() + "/lora");
  return m;
}

// Case `name` of cases.json: its file, layout and sampler settings.
inline const nlohmann::json& causal_case(const std::string& name) {
  static const nlohmann::json all = [] {
    std::ifstream f(causal_dir() + "/cases.json");
    return nlohmann::json::parse(f);
  }();
  for (const auto& c : all["cases"]) {
    if (c["name"] == name) return c;
  }
  throw std::runtime_error("no case " + name + " in " + causal_dir() + "/cases.json");
}

// The sampler request of case `spec` with its tensors `t` (the text among them).
inline CausalRequest causal_request(const nlohmann::json& spec, const std::map<std::string, at::Tensor>& t) {
  CausalRequest r;
  r.text = t.at("text").select(0, 0);
  r.seed = spec["sampler"]["seed"].get<uint64_t>();
  r.video_latents = spec["layout"]["latent_t"].get<int64_t>();
  r.latent_h = spec["layout"]["latent_h"].get<int64_t>();
  r.latent_w = spec["layout"]["latent_w"].get<int64_t>();
  r.audio_latents = spec["layout"]["audio_t"].get<int64_t>();
  r.settings.steps = spec["sampler"]["steps"].get<int64_t>();
  r.settings.sink = spec["sampler"]["sink"].get<int64_t>();
  const auto& w = spec["sampler"]["window"];
  r.settings.window = w.is_null() ? std::nullopt : std::optional<int64_t>(w.get<int64_t>());
  r.settings.video_shift = spec["sampler"]["video_shift"].get<double>();
  r.settings.audio_shift = spec["sampler"]["audio_shift"].get<double>();
  return r;
}

}  // namespace h3::dit::testing
