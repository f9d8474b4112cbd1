#include "engine/process/world_settings.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "admission/crypto.h"
#include "h3/error.h"
#include "h3_config.h"

namespace h3::engine_detail {

namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in && !in.eof()) throw Error(ErrorKind::kNotFound, p.string() + ": cannot read it");
  return ss.str();
}

// The 8-byte length and the JSON header of a safetensors file: dtypes, shapes, offsets.
std::string safetensors_header(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  uint8_t len_bytes[8] = {0};
  if (!in.read(reinterpret_cast<char*>(len_bytes), 8)) return std::string();
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
  if (len > (uint64_t{100} << 20)) return std::string(reinterpret_cast<char*>(len_bytes), 8);
  std::string header(static_cast<size_t>(len), '\0');
  in.read(header.data(), static_cast<std::streamsize>(len));
  return header;
}

}  // namespace

std::string world_settings(const ModelInfo& m, int world_size, const std::string& device,
                           const std::string& compute_dtype, int sp) {
  nlohmann::json o = nlohmann::json::object();
  const fs::path root(m.dir);
  std::vector<fs::path> folders{root};
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.is_directory()) folders.push_back(e.path());
  }
  std::sort(folders.begin(), folders.end());
  for (const auto& dir : folders) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.is_regular_file()) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    std::string headers;
    for (const auto& f : files) {
      const std::string rel = fs::relative(f, root).generic_string();
      if (f.extension() == ".json") o[rel] = dist::sha256_hex(read_all(f));
      if (f.extension() == ".safetensors")
        headers += f.filename().string() + "\n" + safetensors_header(f) + "\n";
    }
    if (!headers.empty()) {
      o[(dir == root ? std::string(".") : fs::relative(dir, root).generic_string()) +
        "/*.safetensors headers"] = dist::sha256_hex(headers);
    }
  }
  o["world size (tensor-parallel split)"] = std::to_string(world_size);
  o["backend"] = device == "cuda" ? "nccl" : "gloo";
  o["compute-dtype"] = compute_dtype;
  o["sp-size (sequence-parallel split)"] = std::to_string(sp);
  o["DiT (transformer/ or Ref2VA's transformer_ref/)"] = fs::path(m.transformer_dir).filename().string();
  o["h3 version"] = H3_VERSION;
  return o.dump();
}

}  // namespace h3::engine_detail
