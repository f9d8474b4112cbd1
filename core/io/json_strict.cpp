#include "io/json_strict.h"

#include <set>
#include <vector>

namespace h3::io {

StrictJson parse_json_strict(const char* begin, const char* end) {
  StrictJson out;
  std::vector<std::set<std::string>> keys;  // one set per open object
  auto cb = [&](int /*depth*/, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start) {
      keys.emplace_back();
    } else if (ev == E::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (ev == E::key && !keys.empty() && parsed.is_string()) {
      const auto& k = parsed.get_ref<const std::string&>();
      if (!keys.back().insert(k).second && !out.duplicate_key) out.duplicate_key = k;
    }
    return true;
  };
  try {
    out.value = nlohmann::json::parse(begin, end, cb);
  } catch (const nlohmann::json::exception& e) {
    out.parse_error = e.what();
    if (out.parse_error.empty()) out.parse_error = "unparsable";
  }
  return out;
}

}  // namespace h3::io
