// Reading model config files (config.json and friends): each value checked for
// its type, every error naming the file and key (h3::Error kFormat / kNotFound).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace h3::io {

// Throws h3::Error(kFormat) "<origin>: <what>".
[[noreturn]] void config_error(const std::string& origin, const std::string& what);

// The whole file as text; throws kNotFound naming it when it cannot be opened.
std::string read_text_file(const std::filesystem::path& path);

// A JSON object (kFormat naming `origin` for invalid JSON or a non-object).
nlohmann::json parse_config_json(const std::string& text, const std::string& origin);

// Optional keys: `out` is kept when the key is absent or null; a value of the wrong type is
// an error. Integers may be written as integral floats (1.0).
void read_int(const nlohmann::json& j, const char* key, const std::string& origin, int64_t& out);
void read_double(const nlohmann::json& j, const char* key, const std::string& origin, double& out);
// A required integer >= 1 (integral floats accepted); kFormat "<where><key> must be a positive
// integer", `where` naming the file and section ("text_encoder/config.json: text_config.").
int64_t positive_int(const nlohmann::json& j, const char* key, const std::string& where);
// Optional array of integers.
void read_ints(const nlohmann::json& j, const char* key, const std::string& origin,
               std::vector<int64_t>& out);
// Required array of numbers (strings of decimals accepted: native wrappers write them so).
std::vector<double> read_doubles(const nlohmann::json& j, const char* key, const std::string& origin);

// Per-channel latent statistics (decoder input = z * std + mean): one finite value per
// channel, no zero std. Throws kFormat naming `origin`.
void check_latent_stats(const std::vector<double>& mean, const std::vector<double>& std, int64_t channels,
                        const std::string& origin);

}  // namespace h3::io
