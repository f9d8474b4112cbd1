// JSON parsing that refuses duplicate object keys. nlohmann keeps the last of
// two equal keys silently; in a checkpoint that would hide a tensor stored
// twice, so both the safetensors header and the index parse through this.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace h3::io {

struct StrictJson {
  nlohmann::json value;
  std::optional<std::string> duplicate_key;  // the first key seen twice in one object
  std::string parse_error;                   // non-empty when the text is not JSON
};

StrictJson parse_json_strict(const char* begin, const char* end);

}  // namespace h3::io
