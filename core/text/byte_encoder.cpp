#include "text/byte_encoder.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "io/safetensors.h"

namespace h3::text {
namespace fs = std::filesystem;

bool ByteEncoder::declared_in(const std::string& dir) {
  std::ifstream in(dir + "/config.json");
  if (!in) return false;
  const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.value("_class_name", std::string()) == kClassName;
}

ByteEncoder::ByteEncoder(at::Tensor table) : table_(std::move(table)) {
  if (!table_.defined() || table_.dim() != 2 || table_.size(0) != kRows || table_.size(1) < 1) {
    throw Error(ErrorKind::kFormat, std::string("byte encoder: `") + kTableName + "` must be [" +
                                        std::to_string(kRows) + ", text_dim]");
  }
  table_ = table_.to(at::kFloat).contiguous();
}

ByteEncoder ByteEncoder::load(const std::string& dir) {
  const std::string cfg_path = dir + "/config.json";
  std::ifstream in(cfg_path);
  if (!in) throw Error(ErrorKind::kNotFound, cfg_path + ": missing (the byte encoder's config)");
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kFormat, cfg_path + ": not valid JSON: " + e.what());
  }
  if (!cfg.is_object() || cfg.value("_class_name", std::string()) != kClassName ||
      !cfg.contains("text_dim") || !cfg["text_dim"].is_number_integer()) {
    throw Error(ErrorKind::kFormat,
                cfg_path + ": expected {\"_class_name\": \"" + kClassName + "\", \"text_dim\": <int>}");
  }
  const int64_t text_dim = cfg["text_dim"].get<int64_t>();
  const std::string weights = dir + "/" + kWeightsFile;
  if (!fs::is_regular_file(weights)) {
    throw Error(ErrorKind::kNotFound, weights + ": missing (the byte encoder's embedding table)");
  }
  const auto file = io::SafetensorsFile::open(weights);
  const auto& info = file->info(kTableName);
  if (info.shape != std::vector<int64_t>{kRows, text_dim}) {
    std::ostringstream s;
    s << weights << ": `" << kTableName << "` is [";
    for (size_t i = 0; i < info.shape.size(); ++i) s << (i ? ", " : "") << info.shape[i];
    s << "] but config.json text_dim " << text_dim << " needs [" << kRows << ", " << text_dim << "]";
    throw Error(ErrorKind::kMismatch, s.str());
  }
  return ByteEncoder(file->view(kTableName).to(at::kFloat).clone());
}

void ByteEncoder::write(const std::string& dir, const at::Tensor& table) {
  const ByteEncoder check(table);
  fs::create_directories(dir);
  nlohmann::json cfg = {
      {"_class_name", kClassName},
      {"text_dim", check.text_dim()},
      {"max_bytes", kMaxBytes},
      {"_comment", "gst-h3 tiny model: UTF-8 bytes -> rows of byte_embeddings.weight after start row 256"}};
  std::ofstream out(dir + "/config.json");
  if (!out || !(out << cfg.dump(2) << "\n")) {
    throw Error(ErrorKind::kNotFound, dir + "/config.json: cannot write");
  }
  io::write_safetensors(dir + "/" + kWeightsFile, {{kTableName, check.table()}});
}

at::Tensor ByteEncoder::random_table(int64_t text_dim, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn({kRows, text_dim}, gen, at::TensorOptions().dtype(at::kFloat));
}

Conditioning ByteEncoder::encode(const std::string& prompt) const {
  if (static_cast<int64_t>(prompt.size()) > kMaxBytes) {
    throw Error(ErrorKind::kInvalidArgument, "prompt: " + std::to_string(prompt.size()) +
                                                 " bytes; the tiny model's byte encoder takes at most " +
                                                 std::to_string(kMaxBytes));
  }
  std::vector<int64_t> idx;
  idx.reserve(prompt.size() + 1);
  idx.push_back(kStartRow);
  for (unsigned char b : prompt) idx.push_back(b);
  Conditioning c;
  c.embeds = table_.index_select(0, at::tensor(idx, at::TensorOptions().dtype(at::kLong))).contiguous();
  return c;
}

}  // namespace h3::text
