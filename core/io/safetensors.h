// Safetensors files: a memory-mapped reader validated fully at open, and a writer.
//
// Views are zero-copy CPU tensors over the mapping; each holds the mapping
// alive. The mapping is read-only: a view must not be written in place (copy it
// first). Owned copies of tensors or of tensor-parallel shards come from
// h3::io::Weights::load, which never keeps the mapping alive.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/safetensors_header.h"

namespace h3::io {

// A read-only private mapping of a whole file; unmapped when the last owner goes.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws kNotFound / kFormat
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  // Drops the resident pages covering [offset, offset + bytes) from this process
  // (they stay in the page cache and fault back in on the next read). Keeps the
  // resident set of a streaming load bounded; contents are unchanged.
  void release_pages(uint64_t offset, uint64_t bytes) const;
  // Maps the pages of [offset, offset + bytes) in one call before a read, instead
  // of one page fault per page (where the kernel supports MADV_POPULATE_READ).
  void prefetch_pages(uint64_t offset, uint64_t bytes) const;

 private:
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

class SafetensorsFile {
 public:
  static std::shared_ptr<const SafetensorsFile> open(const std::string& path);  // throws h3::Error

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }  // in offset order
  const TensorInfo* find(const std::string& name) const;                      // nullptr when absent
  const TensorInfo& info(const std::string& name) const;  // throws kNotFound naming file + tensor
  at::Tensor view(const std::string& name) const;         // zero-copy CPU view; keeps the mapping alive
  at::Tensor view(const TensorInfo& info) const;          // info must come from this file
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }

  // The mapped bytes of the whole file (for checks that a tensor does not alias it).
  const uint8_t* mapped_data() const { return map_->data(); }
  uint64_t mapped_size() const { return map_->size(); }
  // Pointer to the first byte of a tensor's span, and the page release for streaming reads.
  const uint8_t* tensor_data(const TensorInfo& info) const {
    return map_->data() + header_.data_offset + info.begin;
  }
  void release_pages(const TensorInfo& info, uint64_t from, uint64_t bytes) const {
    map_->release_pages(header_.data_offset + info.begin + from, bytes);
  }
  void prefetch_pages(const TensorInfo& info, uint64_t from, uint64_t bytes) const {
    map_->prefetch_pages(header_.data_offset + info.begin + from, bytes);
  }

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::shared_ptr<const MappedFile> map_;
  ParsedHeader header_;
  std::map<std::string, size_t> by_name_;
};

// Writes tensors in the given order (each made contiguous on the CPU) with the
// header padded to 8 bytes so that every view is aligned. Throws
// kInvalidArgument for an empty, reserved or repeated name or an unsupported
// dtype, kNotFound when the file cannot be written.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace h3::io
