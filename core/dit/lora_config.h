// The settings of a PEFT LoRA that decide each module's scale and rank (docs/causal.md "LoRA"):
// PEFT's LoraConfig as adapter_config.json beside the file holds it, or as diffusers writes it
// into the file's own metadata (`lora_adapter_metadata`: the same keys, each prefixed with the
// pipeline component's name, "transformer."). Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace h3::dit {

// One alpha_pattern / rank_pattern entry: a regular expression over module names.
template <typename T>
struct LoraPattern {
  std::string key;  // as written in the config
  std::regex re;    // PEFT's rule: the whole module name matches (.*\.)?(key)
  T value;
};

struct LoraConfig {
  std::string origin;                // the file (and metadata key) it came from, named in messages
  std::optional<double> lora_alpha;  // alpha of every module no alpha_pattern entry matches
  std::optional<int64_t> r;          // rank of every module no rank_pattern entry matches
  std::vector<LoraPattern<double>> alpha_pattern;  // in the config's own order: the first match wins
  std::vector<LoraPattern<int64_t>> rank_pattern;
  bool use_rslora = false;  // scale alpha / sqrt(r) instead of alpha / r
};

// Parses a LoraConfig JSON object. With `component` (e.g. "transformer"), only its keys are
// read, with the "<component>." prefix dropped (diffusers' lora_adapter_metadata). Throws
// h3::Error(kFormat) naming `origin` and the key: text that is not a JSON object, a peft_type
// other than LORA, use_dora, an alpha that is not a positive number, a rank that is not a
// positive integer, a pattern key that is not a regular expression.
LoraConfig parse_lora_config(const std::string& text, const std::string& origin,
                             const std::string& component = "");

// The entry of `patterns` PEFT picks for `module` (its name in the adapted model, as the LoRA
// file's keys give it without "base_model.model."): the first whose regular expression matches
// the whole name as (.*\.)?(key); nullptr when none does.
template <typename T>
const LoraPattern<T>* match_pattern(const std::vector<LoraPattern<T>>& patterns, const std::string& module) {
  for (const auto& p : patterns) {
    if (std::regex_match(module, p.re)) return &p;
  }
  return nullptr;
}

}  // namespace h3::dit
