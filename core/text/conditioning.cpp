#include "text/conditioning.h"

#include <ATen/ATen.h>

#include <filesystem>

#include "common/shape.h"
#include "h3/error.h"
#include "io/safetensors.h"

namespace h3::text {
namespace {}  // namespace

void check_conditioning(const Conditioning& c, int64_t text_dim, const std::string& origin) {
  if (!c.embeds.defined() || c.embeds.dim() != 2 || c.embeds.size(0) < 1) {
    throw Error(ErrorKind::kFormat,
                origin + ": `embeds` must be [L, " + std::to_string(text_dim) + "] with L >= 1 prompt rows" +
                    (c.embeds.defined() ? ", not " + shape_string(c.embeds.sizes()) : std::string()));
  }
  if (c.embeds.size(1) != text_dim) {
    throw Error(ErrorKind::kMismatch, origin + ": `embeds` is " + shape_string(c.embeds.sizes()) +
                                          " but this model's transformer takes " + std::to_string(text_dim) +
                                          "-wide text rows (transformer/config.json text_dim): compute the "
                                          "embeddings with the text encoder that belongs to this model");
  }
  if (!at::isFloatingType(c.embeds.scalar_type())) {
    throw Error(ErrorKind::kFormat, origin + ": `embeds` must be bf16, fp16 or fp32");
  }
  if (c.tags.defined()) {
    if (c.tags.dim() != 1 || c.tags.size(0) != c.embeds.size(0)) {
      throw Error(ErrorKind::kFormat, origin + ": `tags` is " + shape_string(c.tags.sizes()) +
                                          " but must be [" + std::to_string(c.embeds.size(0)) +
                                          "], one tag per `embeds` row");
    }
    if (at::isFloatingType(c.tags.scalar_type()) || c.tags.scalar_type() == at::kBool) {
      throw Error(ErrorKind::kFormat, origin + ": `tags` must hold integers (1 text, 0 vision tokens)");
    }
    if (c.tags.numel() > 0) {
      const int64_t lo = c.tags.min().item<int64_t>(), hi = c.tags.max().item<int64_t>();
      if (lo < 0 || hi > 1) {
        throw Error(ErrorKind::kFormat,
                    origin + ": `tags` values must be 1 (text token) or 0 (vision token); found " +
                        std::to_string(lo) + ".." + std::to_string(hi));
      }
    }
  }
}

Conditioning load_embeddings(const std::string& path, int64_t text_dim) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw Error(ErrorKind::kNotFound,
                path + ": no such embeddings file (a safetensors file holding `embeds` [L, " +
                    std::to_string(text_dim) + "] and optionally `tags` [L])");
  }
  const auto file = io::SafetensorsFile::open(path);
  if (!file->find("embeds")) {
    throw Error(ErrorKind::kFormat, path + ": no tensor `embeds`: an embeddings file holds `embeds` [L, " +
                                        std::to_string(text_dim) +
                                        "] (bf16 or fp32) and optionally `tags` [L]");
  }
  Conditioning c;
  c.embeds = file->view("embeds");
  if (file->find("tags")) c.tags = file->view("tags");
  check_conditioning(c, text_dim, path);
  // Own copies in the engine's precision: the file's mapping is released here.
  c.embeds = c.embeds.to(at::kFloat).clone().contiguous();
  if (c.tags.defined()) c.tags = c.tags.to(at::kLong).clone().contiguous();
  return c;
}

}  // namespace h3::text
