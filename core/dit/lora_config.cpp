#include "dit/lora_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "io/config_json.h"

namespace h3::dit {
namespace {

// The config's own key order decides which pattern wins (PEFT walks the dict as json.load gave
// it), so the object is read with its order kept.
using Json = nlohmann::ordered_json;

bool present(const Json& j, const char* key) {
  return j.contains(key) && !j[key].is_null();
}

double positive_number(const Json& v, const std::string& origin, const std::string& what) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || !(v.get<double>() > 0)) {
    io::config_error(origin, what + " must be a positive number, not " + v.dump());
  }
  return v.get<double>();
}

int64_t positive_rank(const Json& v, const std::string& origin, const std::string& what) {
  const bool integral = v.is_number_integer() ||
                        (v.is_number_float() && std::isfinite(v.get<double>()) &&
                         v.get<double>() == std::floor(v.get<double>()) && std::fabs(v.get<double>()) < 1e15);
  if (!integral || v.get<double>() < 1) {
    io::config_error(origin, what + " must be a positive integer, not " + v.dump());
  }
  return static_cast<int64_t>(v.get<double>());
}

// A pattern's expression is the file's, not ours: matched in polynomial time (libstdc++'s Thompson
// NFA, which refuses back-references) so that no pattern can stall the loader, and kept short so
// that its compilation stays shallow.
constexpr size_t kMaxPatternKey = 256;

std::regex pattern_regex(const std::string& key, const std::string& origin, const char* field) {
  if (key.size() > kMaxPatternKey) {
    io::config_error(origin, std::string(field) + " has a key of " + std::to_string(key.size()) +
                                 " characters: at most " + std::to_string(kMaxPatternKey) + " are read");
  }
  try {
    return std::regex("(.*\\.)?(" + key + ")", std::regex::ECMAScript | std::regex_constants::__polynomial);
  } catch (const std::regex_error& e) {
    io::config_error(origin, std::string(field) + " key '" + key + "' is not a regular expression (" +
                                 e.what() + "): PEFT matches these keys as regular expressions");
  }
}

}  // namespace

LoraConfig parse_lora_config(const std::string& text, const std::string& origin,
                             const std::string& component) {
  Json all = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (all.is_discarded() || !all.is_object()) {
    io::config_error(origin, "is not a JSON object: a LoRA's settings are PEFT's LoraConfig as JSON");
  }
  Json j = Json::object();
  if (component.empty()) {
    j = std::move(all);
  } else {
    const std::string prefix = component + ".";
    for (const auto& [k, v] : all.items()) {
      if (k.compare(0, prefix.size(), prefix) == 0) j[k.substr(prefix.size())] = v;
    }
  }
  LoraConfig c;
  c.origin = origin;
  if (present(j, "peft_type") && j["peft_type"] != "LORA") {
    io::config_error(origin, "peft_type is " + j["peft_type"].dump() +
                                 ": only LoRA adapters (peft_type LORA) are supported");
  }
  if (present(j, "use_dora") && j["use_dora"] != false) {
    io::config_error(
        origin, "use_dora is " + j["use_dora"].dump() + ": DoRA adapters are not supported, only plain LoRA");
  }
  if (present(j, "use_rslora")) {
    if (!j["use_rslora"].is_boolean()) io::config_error(origin, "use_rslora must be true or false");
    c.use_rslora = j["use_rslora"].get<bool>();
  }
  if (present(j, "lora_alpha")) c.lora_alpha = positive_number(j["lora_alpha"], origin, "lora_alpha");
  if (present(j, "r")) c.r = positive_rank(j["r"], origin, "r");
  for (const char* field : {"alpha_pattern", "rank_pattern"}) {
    if (!present(j, field)) continue;
    if (!j[field].is_object()) io::config_error(origin, std::string(field) + " must be an object");
    const bool alpha = std::string(field) == "alpha_pattern";
    for (const auto& [k, v] : j[field].items()) {
      const std::string what = std::string(field) + "['" + k + "']";
      if (alpha) {
        c.alpha_pattern.push_back({k, pattern_regex(k, origin, field), positive_number(v, origin, what)});
      } else {
        c.rank_pattern.push_back({k, pattern_regex(k, origin, field), positive_rank(v, origin, what)});
      }
    }
  }
  return c;
}

}  // namespace h3::dit
