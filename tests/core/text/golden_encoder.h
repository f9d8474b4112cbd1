// The golden tiny Qwen3-VL text encoder (tests/data/golden/h3_text), stored compactly in the
// project (text_encoder_tiny_compact/: every tensor but embed_tokens, whose nonzero rows are kept
// as rows + values), rebuilt at full size in the release's layout: config.json, a two-shard
// index, model.language_model.* and model.visual.* names.
#pragma once

#include <ATen/ATen.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "io/safetensors.h"

namespace h3::test {

inline std::string data_dir() {
  const char* d = std::getenv("H3_TEST_DATA");
  return d ? d : "tests/data";
}
inline std::string text_golden_dir() {
  return data_dir() + "/golden/h3_text";
}
// The tokenizer files the project ships (data/default/tokenizer): the release's own.
inline std::string shipped_tokenizer_dir() {
  return (std::filesystem::path(data_dir()) / ".." / ".." / "data" / "default" / "tokenizer")
      .lexically_normal()
      .string();
}

inline std::map<std::string, at::Tensor> read_tensors(const std::string& path) {
  auto f = io::SafetensorsFile::open(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& info : f->tensors()) out[info.name] = f->view(info.name).clone();
  return out;
}

// A tensor's replacement in the rebuilt checkpoint: nullopt keeps it, an undefined tensor drops it.
using Mutate = std::function<std::optional<at::Tensor>(const std::string& name, const at::Tensor& t)>;

// Writes the golden encoder into `dir` (created) with the index's shard assignment; `mutate`
// may drop or replace tensors (the index is rewritten to match).
inline void write_golden_encoder(const std::string& dir, const Mutate& mutate = nullptr) {
  namespace fs = std::filesystem;
  const fs::path src = fs::path(text_golden_dir()) / "text_encoder_tiny_compact";
  fs::create_directories(dir);
  fs::copy_file(src / "config.json", fs::path(dir) / "config.json", fs::copy_options::overwrite_existing);
  auto t = read_tensors((src / "compact.safetensors").string());
  const auto rows = t.at("compact.embed_tokens.rows");
  const auto values = t.at("compact.embed_tokens.values");
  auto embed = at::zeros({151936, values.size(1)}, at::kFloat);
  embed.index_copy_(0, rows, values);
  t.erase("compact.embed_tokens.rows");
  t.erase("compact.embed_tokens.values");
  t["model.language_model.embed_tokens.weight"] = embed;

  std::ifstream in(src / "model.safetensors.index.json");
  const auto index = nlohmann::json::parse(in);
  std::map<std::string, std::vector<std::pair<std::string, at::Tensor>>> shards;
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total = 0;
  for (const auto& [name, file] : index["weight_map"].items()) {
    at::Tensor v = t.at(name);
    if (mutate) {
      if (auto m = mutate(name, v)) v = *m;
    }
    if (!v.defined()) continue;
    shards[file.get<std::string>()].emplace_back(name, v);
    weight_map[name] = file;
    total += static_cast<uint64_t>(v.numel() * v.element_size());
  }
  for (const auto& [file, tensors] : shards) io::write_safetensors((fs::path(dir) / file).string(), tensors);
  std::ofstream out(fs::path(dir) / "model.safetensors.index.json");
  out << nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2);
}

inline double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>();
}

}  // namespace h3::test
