#include "marking/record.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "h3/error.h"

namespace h3::marking {

using nlohmann::json;

std::string to_json(const Record& r) {
  json changes = json::array();
  for (const PromptChange& c : r.changes) {
    changes.push_back(
        {{"chunk", c.chunk}, {"first_frame", c.first_frame}, {"seconds", c.seconds}, {"prompt", c.prompt}});
  }
  const json j = {
      {"version", r.version},
      {"generator", r.generator},
      {"element", r.element},
      {"model", {{"name", r.model_name}, {"sha256", r.model_sha256}}},
      {"prompt", r.prompt},
      {"prompt_embeds", r.prompt_embeds},
      {"conditioning", r.conditioning},
      {"seed", r.seed},
      {"sampler", r.sampler},
      {"width", r.width},
      {"height", r.height},
      {"num_frames", r.num_frames},
      {"steps", r.steps},
      {"framerate", {r.fps_n, r.fps_d}},
      {"sink", r.sink},
      {"window", r.window},
      {"positions", r.positions},
      {"prompt_switch", r.prompt_switch},
      {"lora", {{"name", r.lora_name}, {"sha256", r.lora_sha256}}},
      {"compute_dtype", r.compute_dtype},
      {"device", r.device},
      {"ranks", r.ranks},
      {"tp", r.tp},
      {"sp", r.sp},
      {"adaln_tables", r.adaln_tables},
      {"audio", r.audio},
      {"changes", changes},
  };
  // Invalid UTF-8 (a prompt property holds bytes) is replaced, not thrown: the stream must start.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

// j[key] as T, or an error naming the record and the field.
template <typename T>
T field(const json& j, const char* key, const std::string& origin, const std::string& path = "") {
  const std::string name = path.empty() ? key : path + "." + key;
  if (!j.is_object() || !j.contains(key)) {
    throw Error(ErrorKind::kFormat, origin + ": the h3 record has no field '" + name + "'");
  }
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    throw Error(ErrorKind::kFormat, origin + ": the h3 record's field '" + name +
                                        "' is not of the expected type (" + j.at(key).dump().substr(0, 80) +
                                        ")");
  }
}

}  // namespace

Record record_from_json(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::kFormat, origin + ": the h3 record is not JSON: " + e.what());
  }
  Record r;
  r.version = field<int>(j, "version", origin);
  if (r.version != 1) {
    throw Error(ErrorKind::kFormat, origin + ": h3 record version " + std::to_string(r.version) +
                                        " (this build reads version 1)");
  }
  r.generator = field<std::string>(j, "generator", origin);
  r.element = field<std::string>(j, "element", origin);
  const json model = field<json>(j, "model", origin);
  r.model_name = field<std::string>(model, "name", origin, "model");
  r.model_sha256 = field<std::string>(model, "sha256", origin, "model");
  r.prompt = field<std::string>(j, "prompt", origin);
  r.prompt_embeds = field<std::string>(j, "prompt_embeds", origin);
  r.conditioning = field<std::vector<std::string>>(j, "conditioning", origin);
  r.seed = field<uint64_t>(j, "seed", origin);
  r.sampler = field<std::string>(j, "sampler", origin);
  r.width = field<int64_t>(j, "width", origin);
  r.height = field<int64_t>(j, "height", origin);
  r.num_frames = field<int64_t>(j, "num_frames", origin);
  r.steps = field<int64_t>(j, "steps", origin);
  const auto rate = field<std::vector<int64_t>>(j, "framerate", origin);
  if (rate.size() != 2 || rate[0] <= 0 || rate[1] <= 0) {
    throw Error(ErrorKind::kFormat,
                origin + ": the h3 record's field 'framerate' is not [n, d] with n, d > 0");
  }
  r.fps_n = rate[0];
  r.fps_d = rate[1];
  r.sink = field<int64_t>(j, "sink", origin);
  r.window = field<int64_t>(j, "window", origin);
  // Optional: records written before them had absolute positions and kept the chunks at a switch.
  r.positions = j.contains("positions") ? field<std::string>(j, "positions", origin) : "absolute";
  r.prompt_switch = j.contains("prompt_switch") ? field<std::string>(j, "prompt_switch", origin) : "keep";
  const json lora = field<json>(j, "lora", origin);
  r.lora_name = field<std::string>(lora, "name", origin, "lora");
  r.lora_sha256 = field<std::string>(lora, "sha256", origin, "lora");
  r.compute_dtype = field<std::string>(j, "compute_dtype", origin);
  r.device = field<std::string>(j, "device", origin);
  r.ranks = field<int64_t>(j, "ranks", origin);
  r.tp = field<int64_t>(j, "tp", origin);
  r.sp = field<int64_t>(j, "sp", origin);
  r.adaln_tables = field<bool>(j, "adaln_tables", origin);
  r.audio = field<bool>(j, "audio", origin);
  const json changes = field<json>(j, "changes", origin);
  if (!changes.is_array())
    throw Error(ErrorKind::kFormat, origin + ": the h3 record's field 'changes' is not a list");
  for (size_t i = 0; i < changes.size(); ++i) {
    const std::string at = "changes[" + std::to_string(i) + "]";
    PromptChange c;
    c.chunk = field<int64_t>(changes[i], "chunk", origin, at);
    c.first_frame = field<int64_t>(changes[i], "first_frame", origin, at);
    c.seconds = field<double>(changes[i], "seconds", origin, at);
    c.prompt = field<std::string>(changes[i], "prompt", origin, at);
    r.changes.push_back(std::move(c));
  }
  return r;
}

std::string prompt_information(const Record& r) {
  std::string s = r.prompt.empty() ? "prompt embeddings " + r.prompt_embeds : r.prompt;
  for (const PromptChange& c : r.changes) {
    char at[64];
    std::snprintf(at, sizeof at, "\nfrom %.3f s (chunk %lld): ", c.seconds, static_cast<long long>(c.chunk));
    s += at + c.prompt;
  }
  return s;
}

std::string one_line(const std::string& text, size_t max_bytes) {
  size_t end = text.find_first_of("\r\n");
  if (end == std::string::npos) end = text.size();
  bool cut = end < text.size();
  if (end > max_bytes) {
    end = max_bytes;
    // Back to the start of a UTF-8 character (continuation bytes are 10xxxxxx).
    while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
    cut = true;
  }
  return cut ? text.substr(0, end) + "\xE2\x80\xA6" : text;
}

}  // namespace h3::marking
