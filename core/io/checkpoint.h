// A checkpoint: one .safetensors file, a sharded *.safetensors.index.json, or a
// folder holding exactly one of them. Every shard is opened (and validated)
// once at open; the index is checked against the shards' own headers.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace h3::io {

// A parsed *.safetensors.index.json: tensor name -> shard file name.
struct CheckpointIndex {
  std::map<std::string, std::string> weight_map;
  std::optional<uint64_t> total_size;            // metadata.total_size when present
  std::vector<std::string> shard_files() const;  // distinct, sorted
};
// Throws kNotFound / kFormat (invalid JSON, a missing or malformed weight_map,
// a name listed twice, a shard name that is not a plain file name).
CheckpointIndex read_checkpoint_index(const std::string& index_path);

class Checkpoint {
 public:
  static Checkpoint open(const std::string& path);

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  const TensorInfo* find(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // throws kNotFound naming the checkpoint + tensor
  at::Tensor view(const std::string& name) const;

  // The file holding a tensor (nullptr when absent), and every opened file.
  const SafetensorsFile* file_of(const std::string& name) const;
  std::shared_ptr<const SafetensorsFile> shared_file_of(const std::string& name) const;
  const std::vector<std::shared_ptr<const SafetensorsFile>>& files() const { return files_; }

 private:
  std::string path_;
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // name -> index into files_
};

}  // namespace h3::io
