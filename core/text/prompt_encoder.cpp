#include "text/prompt_encoder.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dist/agree.h"
#include "dist/group.h"
#include "h3/error.h"

namespace h3::text {
namespace fs = std::filesystem;

std::string tokenizer_dir_of(const std::string& model_dir) {
  return (fs::path(model_dir) / "tokenizer").string();
}
std::string text_encoder_dir_of(const std::string& model_dir) {
  return (fs::path(model_dir) / "text_encoder").string();
}

void refuse_byte_encoder(const std::string& text_encoder_dir) {
  const std::string config = (fs::path(text_encoder_dir) / "config.json").string();
  std::ifstream in(config);
  if (!in) return;
  const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("_class_name", std::string()) != "H3ByteEncoder") return;
  throw Error(
      ErrorKind::kFormat,
      config +
          " declares H3ByteEncoder, the byte-table text encoder of older tiny models, which is no longer "
          "supported: give the folder a Qwen3-VL text encoder (text_encoder/ and tokenizer/, as h3 "
          "make-tiny writes them), or remove text_encoder/ and condition it on prompt embeddings "
          "(h3 encode-prompt --model DIR --prompt TEXT --out FILE, from a folder that has a Qwen3-VL "
          "encoder; then h3 generate --embeds FILE, or the element's embeds property)");
}

bool has_prompt_encoder(const std::string& model_dir) {
  std::ifstream in(fs::path(text_encoder_dir_of(model_dir)) / "config.json");
  if (!in || !fs::is_directory(tokenizer_dir_of(model_dir))) return false;
  const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.value("model_type", std::string()) == "qwen3_vl" && j.contains("text_config");
}

PromptEncoder PromptEncoder::load(const std::string& model_dir, int64_t layer, dist::Group* group,
                                  const EncoderOptions& opts) {
  const int64_t k = layer > 0 ? layer : conditioning_layer_of(model_dir);
  Tokenizer t = Tokenizer::load(tokenizer_dir_of(model_dir));
  TextEncoder e = TextEncoder::load(text_encoder_dir_of(model_dir), k, group, opts);
  if (e.config().vocab_size < t.vocab_size()) {
    throw Error(ErrorKind::kMismatch, text_encoder_dir_of(model_dir) + ": embed_tokens has " +
                                          std::to_string(e.config().vocab_size) +
                                          " rows but the tokenizer in " + tokenizer_dir_of(model_dir) +
                                          " gives ids up to " + std::to_string(t.vocab_size() - 1));
  }
  return PromptEncoder(std::move(t), std::move(e), opts);
}

void PromptEncoder::reload_weights(dist::Group* group) {
  // Load into a new encoder first: a failed reload leaves this one released, not half-loaded.
  TextEncoder e = TextEncoder::load(encoder_.dir(), encoder_.layer(), group, options_);
  encoder_ = std::move(e);
}

Conditioning PromptEncoder::encode(const std::string& prompt) const {
  return encoder_.encode(tokenizer_.encode(prompt));
}

Conditioning PromptEncoder::encode_on_ranks(dist::Group& g, const std::string& prompt_on_root) const {
  dist::LocalFailure f;
  std::vector<int64_t> ids;
  if (g.rank() == 0) {
    try {
      ids = tokenizer_.encode(prompt_on_root);
      if (ids.empty()) encoder_.forward(ids);  // throws the empty-prompt error before any collective
    } catch (...) {
      f.capture();
    }
  }
  dist::agree_or_throw(g, f);
  const int64_t n = g.broadcast_int(static_cast<int64_t>(ids.size()), 0);
  at::Tensor t = g.rank() == 0 ? at::tensor(ids, at::kLong) : at::empty({n}, at::kLong);
  t = t.to(g.device());
  g.broadcast(t, 0);
  ids.assign(n, 0);
  const auto cpu = t.to(at::kCPU).contiguous();
  std::copy(cpu.data_ptr<int64_t>(), cpu.data_ptr<int64_t>() + n, ids.begin());
  return encoder_.encode(ids);
}

}  // namespace h3::text
