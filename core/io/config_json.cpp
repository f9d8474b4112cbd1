#include "io/config_json.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "h3/error.h"

namespace h3::io {

using nlohmann::json;

void config_error(const std::string& origin, const std::string& what) {
  throw Error(ErrorKind::kFormat, origin + ": " + what);
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(ErrorKind::kNotFound, path.string() + ": cannot open the file");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

json parse_config_json(const std::string& text, const std::string& origin) {
  try {
    json j = json::parse(text);
    if (!j.is_object()) config_error(origin, "expected a JSON object at the top level");
    return j;
  } catch (const json::parse_error& e) {
    config_error(origin, std::string("not valid JSON: ") + e.what());
  }
}

namespace {

bool as_int(const json& x, int64_t& out) {
  if (x.is_number_integer() || x.is_number_unsigned()) {
    out = x.get<int64_t>();
    return true;
  }
  if (x.is_number_float() && std::floor(x.get<double>()) == x.get<double>()) {
    out = static_cast<int64_t>(x.get<double>());
    return true;
  }
  return false;
}

}  // namespace

void read_int(const json& j, const char* key, const std::string& origin, int64_t& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  if (!as_int(*it, out)) config_error(origin, std::string("key '") + key + "' must be an integer");
}

void read_double(const json& j, const char* key, const std::string& origin, double& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  if (!it->is_number()) config_error(origin, std::string("key '") + key + "' must be a number");
  out = it->get<double>();
}

int64_t positive_int(const json& j, const char* key, const std::string& where) {
  int64_t v = 0;
  const auto it = j.find(key);
  if (it == j.end() || !as_int(*it, v) || v < 1) {
    throw Error(ErrorKind::kFormat, where + key + " must be a positive integer");
  }
  return v;
}

void read_ints(const json& j, const char* key, const std::string& origin, std::vector<int64_t>& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  if (!it->is_array()) config_error(origin, std::string("key '") + key + "' must be an array of integers");
  std::vector<int64_t> v;
  for (const auto& x : *it) {
    int64_t n = 0;
    if (!as_int(x, n)) config_error(origin, std::string("key '") + key + "' must be an array of integers");
    v.push_back(n);
  }
  out = std::move(v);
}

std::vector<double> read_doubles(const json& j, const char* key, const std::string& origin) {
  auto it = j.find(key);
  if (it == j.end()) config_error(origin, std::string("missing key '") + key + "'");
  if (!it->is_array()) config_error(origin, std::string("key '") + key + "' must be an array of numbers");
  std::vector<double> v;
  for (const auto& x : *it) {
    if (x.is_number()) {
      v.push_back(x.get<double>());
    } else if (x.is_string()) {
      try {
        size_t used = 0;
        const std::string s = x.get<std::string>();
        v.push_back(std::stod(s, &used));
        if (used != s.size()) throw std::invalid_argument(s);
      } catch (const std::exception&) {
        config_error(origin, std::string("key '") + key + "' holds a value that is not a number");
      }
    } else {
      config_error(origin, std::string("key '") + key + "' must be an array of numbers");
    }
  }
  return v;
}

void check_latent_stats(const std::vector<double>& mean, const std::vector<double>& std, int64_t channels,
                        const std::string& origin) {
  auto count = [&](const char* key, size_t n) {
    if (static_cast<int64_t>(n) != channels) {
      config_error(origin, std::string(key) + " has " + std::to_string(n) + " values for " +
                               std::to_string(channels) + " latent channels");
    }
  };
  count("latents_mean", mean.size());
  count("latents_std", std.size());
  for (double s : std) {
    if (!std::isfinite(s) || s == 0.0) config_error(origin, "latents_std holds a zero or non-finite value");
  }
  for (double m : mean) {
    if (!std::isfinite(m)) config_error(origin, "latents_mean holds a non-finite value");
  }
}

}  // namespace h3::io
