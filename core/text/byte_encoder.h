// The tiny default model's built-in text encoder: the prompt's UTF-8 bytes index rows of an
// embedding table stored with the model (text_encoder/model.safetensors), after one start row.
// It carries no language understanding; it exists so that a prompt string changes the tiny
// model's output deterministically, through the same conditioning path the full-size model
// uses with precomputed embeddings.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "text/conditioning.h"

namespace h3::text {

class ByteEncoder {
 public:
  static constexpr const char* kClassName = "H3ByteEncoder";  // text_encoder/config.json _class_name
  static constexpr const char* kTableName = "byte_embeddings.weight";
  static constexpr const char* kWeightsFile = "model.safetensors";
  static constexpr int64_t kStartRow = 256;  // the row every prompt begins with (so "" is 1 row)
  static constexpr int64_t kRows = 257;      // 256 byte values + the start row
  static constexpr int64_t kMaxBytes = 4096;

  // Whether `text_encoder_dir`/config.json declares this encoder (false for Qwen3-VL, or none).
  static bool declared_in(const std::string& text_encoder_dir);
  // Reads config.json and the table; throws h3::Error (kNotFound, kFormat, kMismatch) naming the file.
  static ByteEncoder load(const std::string& text_encoder_dir);
  // Writes config.json and model.safetensors into `dir` (created).
  static void write(const std::string& dir, const at::Tensor& table);
  // A seeded table of unit-variance rows, [kRows, text_dim] fp32.
  static at::Tensor random_table(int64_t text_dim, uint64_t seed);

  explicit ByteEncoder(at::Tensor table);  // [kRows, text_dim]
  int64_t text_dim() const { return table_.size(1); }
  const at::Tensor& table() const { return table_; }

  // [1 + bytes, text_dim] fp32 rows, all tagged as text. Throws kInvalidArgument above kMaxBytes.
  Conditioning encode(const std::string& prompt) const;

 private:
  at::Tensor table_;
};

}  // namespace h3::text
