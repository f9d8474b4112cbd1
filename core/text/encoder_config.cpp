#include "text/encoder_config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "h3/error.h"
#include "io/config_json.h"

namespace h3::text {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

double positive_number(const json& j, const char* key, double fallback, const std::string& origin) {
  if (!j.contains(key)) return fallback;
  if (!j[key].is_number() || !(j[key].get<double>() > 0)) {
    throw Error(ErrorKind::kFormat, origin + ": text_config." + key + " must be a positive number");
  }
  return j[key].get<double>();
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    throw Error(ErrorKind::kNotFound,
                p.string() + ": missing (the text encoder's config; the release keeps it in text_encoder/)");
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

void EncoderConfig::validate(const std::string& origin) const {
  auto fail = [&](const std::string& what) { throw Error(ErrorKind::kFormat, origin + ": " + what); };
  if (num_heads % num_kv_heads != 0) {
    fail("num_attention_heads " + std::to_string(num_heads) + " is not a multiple of num_key_value_heads " +
         std::to_string(num_kv_heads));
  }
  if (head_dim % 2 != 0) fail("head_dim must be even (RoPE rotates pairs)");
  const int64_t sections = mrope_section[0] + mrope_section[1] + mrope_section[2];
  if (sections != head_dim / 2 || mrope_section[0] < 0 || mrope_section[1] < 0 || mrope_section[2] < 0) {
    fail("rope_scaling.mrope_section must be three counts summing to head_dim / 2 = " +
         std::to_string(head_dim / 2));
  }
}

void EncoderConfig::check_tp(int tp, const std::string& origin) const {
  if (tp < 1 || num_heads % tp != 0 || num_kv_heads % tp != 0 || intermediate_size % tp != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                origin + ": " + std::to_string(tp) +
                    " tensor-parallel ranks cannot split the text encoder (" + std::to_string(num_heads) +
                    " query heads, " + std::to_string(num_kv_heads) + " key-value heads, SwiGLU width " +
                    std::to_string(intermediate_size) + "): use a rank count that divides all three");
  }
}

EncoderConfig EncoderConfig::parse(const std::string& text, const std::string& origin) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::kFormat, origin + ": not valid JSON: " + e.what());
  }
  if (!root.is_object()) throw Error(ErrorKind::kFormat, origin + ": must be a JSON object");
  const json& t = root.contains("text_config") ? root["text_config"] : root;
  if (!t.is_object()) throw Error(ErrorKind::kFormat, origin + ": text_config must be an object");
  EncoderConfig c;
  c.hidden_size = io::positive_int(t, "hidden_size", origin + ": text_config.");
  c.num_layers = io::positive_int(t, "num_hidden_layers", origin + ": text_config.");
  c.num_heads = io::positive_int(t, "num_attention_heads", origin + ": text_config.");
  c.num_kv_heads = t.contains("num_key_value_heads")
                       ? io::positive_int(t, "num_key_value_heads", origin + ": text_config.")
                       : c.num_heads;
  c.head_dim = t.contains("head_dim") ? io::positive_int(t, "head_dim", origin + ": text_config.")
                                      : c.hidden_size / c.num_heads;
  c.intermediate_size = io::positive_int(t, "intermediate_size", origin + ": text_config.");
  c.vocab_size = io::positive_int(t, "vocab_size", origin + ": text_config.");
  c.rms_norm_eps = positive_number(t, "rms_norm_eps", c.rms_norm_eps, origin);
  c.rope_theta = positive_number(t, "rope_theta", c.rope_theta, origin);
  if (t.contains("attention_bias") && t["attention_bias"].is_boolean() && t["attention_bias"].get<bool>()) {
    throw Error(ErrorKind::kFormat, origin + ": attention_bias true is not the Qwen3-VL text model");
  }
  const json rs = t.value("rope_scaling", json::object());
  if (!rs.is_object() || !rs.contains("mrope_section") || !rs["mrope_section"].is_array() ||
      rs["mrope_section"].size() != 3) {
    throw Error(ErrorKind::kFormat, origin + ": text_config.rope_scaling.mrope_section must be a list of 3");
  }
  for (int i = 0; i < 3; ++i) {
    if (!rs["mrope_section"][i].is_number_integer())
      throw Error(ErrorKind::kFormat, origin + ": mrope_section must hold integers");
    c.mrope_section[i] = rs["mrope_section"][i].get<int64_t>();
  }
  c.mrope_interleaved = rs.value("mrope_interleaved", false);
  if (t.contains("dtype") && t["dtype"].is_string())
    c.dtype = t["dtype"].get<std::string>();
  else if (t.contains("torch_dtype") && t["torch_dtype"].is_string())
    c.dtype = t["torch_dtype"].get<std::string>();
  c.validate(origin);
  return c;
}

EncoderConfig EncoderConfig::load(const std::string& path) {
  fs::path p(path);
  if (fs::is_directory(p) || p.extension() != ".json") p /= "config.json";  // a folder, there or not
  return parse(read_text(p), p.string());
}

std::string EncoderConfig::to_json() const {
  json text = {
      {"attention_bias", false},
      {"dtype", dtype},
      {"head_dim", head_dim},
      {"hidden_act", "silu"},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"model_type", "qwen3_vl_text"},
      {"num_attention_heads", num_heads},
      {"num_hidden_layers", num_layers},
      {"num_key_value_heads", num_kv_heads},
      {"rms_norm_eps", rms_norm_eps},
      {"rope_scaling",
       {{"mrope_interleaved", mrope_interleaved},
        {"mrope_section", {mrope_section[0], mrope_section[1], mrope_section[2]}},
        {"rope_type", "default"}}},
      {"rope_theta", rope_theta},
      {"vocab_size", vocab_size},
  };
  json j = {
      {"architectures", {"Qwen3VLForConditionalGeneration"}},
      {"model_type", "qwen3_vl"},
      {"text_config", text},
      {"tie_word_embeddings", false},
  };
  return j.dump(2) + "\n";
}

int64_t conditioning_layer_of(const std::string& model_dir) {
  const fs::path p = fs::path(model_dir) / "model_index.json";
  if (!fs::is_regular_file(p)) return kReleaseConditioningLayer;
  json j;
  try {
    j = json::parse(read_text(p));
  } catch (const json::exception& e) {
    throw Error(ErrorKind::kFormat, p.string() + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("text_encoder_layer")) return kReleaseConditioningLayer;
  if (!j["text_encoder_layer"].is_number_integer() || j["text_encoder_layer"].get<int64_t>() < 1) {
    throw Error(ErrorKind::kFormat, p.string() + ": text_encoder_layer must be a positive integer");
  }
  return j["text_encoder_layer"].get<int64_t>();
}

}  // namespace h3::text
