// What a generated stream says about itself (docs/element.md, "Marking"): that it is generated,
// by which model (its name and model_sha256), from which prompts, seed and sampler, and every
// value `h3 replay` needs to make it again. The elements send it as the `h3-record` tag (JSON)
// beside IPTC's fields; h3mark writes it into MP4 files inside the XMP packet (xmp.h).
// Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace h3::marking {

// IPTC's digital source type for media a trained model made (cv.iptc.org/newscodes).
inline constexpr const char* kDigitalSourceType =
    "http://cv.iptc.org/newscodes/digitalsourcetype/trainedAlgorithmicMedia";

// A causal stream's prompt that took over from `chunk` on (its first frame `first_frame`, at
// `seconds` into the stream).
struct PromptChange {
  int64_t chunk = 0, first_frame = 0;
  double seconds = 0;
  std::string prompt;
};

struct Record {
  int version = 1;
  std::string generator;     // "gst-h3 VERSION"
  std::string element;       // h3src, h3videosrc
  std::string model_name;    // the model folder's name
  std::string model_sha256;  // model_digest.h
  // The first prompt; empty when prompt embeddings replaced it (`prompt_embeds`: their file's name).
  std::string prompt, prompt_embeds;
  // Pictures or references the clip was conditioned on (their files): replay cannot make such a
  // stream again from the file alone and says so.
  std::vector<std::string> conditioning;
  uint64_t seed = 0;
  std::string sampler;  // euler, causal
  // The plan: the values the engine used (the model's defaults resolved); num_frames -1: endless.
  int64_t width = 0, height = 0, num_frames = 0, steps = 0;
  int64_t fps_n = 0, fps_d = 1;
  int64_t sink = 0, window = 0;
  // causal: the positions and the prompt switch asked for (h3/request_enums.h's names: auto,
  // absolute, relative; keep, recache). A record written before they existed reads as absolute and
  // keep: what every stream then had.
  std::string positions = "auto", prompt_switch = "keep";
  std::string lora_name, lora_sha256;  // empty: none
  std::string compute_dtype;           // empty: the device's default
  std::string device;
  int64_t ranks = 1, tp = 0, sp = 1;
  bool adaln_tables = true;
  bool audio = false;                 // the stream has the soundtrack (h3src)
  std::vector<PromptChange> changes;  // in the order they took over
};

std::string to_json(const Record& r);
// Throws h3::Error(kFormat) naming `origin` and the field that is missing or of the wrong type.
Record record_from_json(const std::string& text, const std::string& origin);

// Every prompt of the stream, one a line: the first, then "from S s (chunk C): PROMPT" for each
// change; a prompt's own line breaks are kept (IPTC's AI Prompt Information).
std::string prompt_information(const Record& r);

// `text` cut to at most `max_bytes` bytes on a UTF-8 character boundary, at its first line break,
// with "…" appended when anything was cut: what the one-line tags (title) show.
std::string one_line(const std::string& text, size_t max_bytes);

}  // namespace h3::marking
