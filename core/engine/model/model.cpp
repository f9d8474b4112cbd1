#include "engine/model/model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "audio/audio_encoder.h"
#include "audio/config.h"
#include "dit/frames.h"
#include "dit/sampler.h"
#include "h3/error.h"
#include "io/weights.h"
#include "text/prompt_encoder.h"

namespace h3 {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw Error(ErrorKind::kNotFound, p.string() + ": cannot read");
  try {
    return json::parse(in);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kFormat, p.string() + ": not valid JSON: " + e.what());
  }
}

// A scheduler folder's "shift", or the release value when the folder is absent.
double read_shift(const fs::path& dir, double fallback) {
  const fs::path p = dir / "scheduler_config.json";
  if (!fs::is_regular_file(p)) return fallback;
  const json j = read_json(p);
  if (!j.is_object() || !j.contains("shift")) return fallback;
  if (!j["shift"].is_number() || !(j["shift"].get<double>() > 0)) {
    throw Error(ErrorKind::kFormat, p.string() + ": \"shift\" must be a positive number");
  }
  return j["shift"].get<double>();
}

// model_index.json's "_minimax_h3" "tasks" (the native partitions'); empty where it has none.
std::vector<std::string> read_tasks(const json& idx, const fs::path& index) {
  std::vector<std::string> tasks;
  if (!idx.contains("_minimax_h3")) return tasks;
  const json& r = idx["_minimax_h3"];
  if (!r.is_object() || (r.contains("tasks") && !r["tasks"].is_array())) {
    throw Error(ErrorKind::kFormat,
                index.string() + ": \"_minimax_h3\" must be an object whose \"tasks\" is a list");
  }
  for (const json& t : r.value("tasks", json::array())) {
    if (!t.is_string())
      throw Error(ErrorKind::kFormat, index.string() + ": \"_minimax_h3\".\"tasks\" must hold strings");
    tasks.push_back(t.get<std::string>());
  }
  return tasks;
}

int64_t default_field(const json& d, const char* key, int64_t fallback, const fs::path& origin) {
  if (!d.contains(key)) return fallback;
  if (!d[key].is_number_integer() || d[key].get<int64_t>() < 1) {
    throw Error(ErrorKind::kFormat, origin.string() + ": gst_h3." + key + " must be a positive integer");
  }
  return d[key].get<int64_t>();
}

}  // namespace

ModelInfo read_model(const std::string& dir, bool ref2va) {
  const fs::path root(dir);
  if (dir.empty()) throw Error(ErrorKind::kNotFound, "no model folder given");
  if (!fs::is_directory(root)) {
    throw Error(ErrorKind::kNotFound,
                dir +
                    ": no such model folder (expected model_index.json, transformer/ and "
                    "vae/; `h3 make-tiny --out DIR` writes a tiny one)");
  }
  const fs::path index = root / "model_index.json";
  if (!fs::is_regular_file(index)) {
    throw Error(ErrorKind::kNotFound, index.string() + ": missing: " + dir +
                                          " is not a model folder in the release layout (model_index.json, "
                                          "transformer/, vae/)");
  }
  const json idx = read_json(index);
  if (!idx.is_object()) throw Error(ErrorKind::kFormat, index.string() + ": must be a JSON object");

  ModelInfo m;
  m.dir = dir;
  m.transformer_dir = (root / "transformer").string();
  // The diffusers layout keeps the video VAE in vae/, the native partitions (FL2VA/, Ref2VA/) in
  // video_vae/ (find_vae reads either).
  m.vae_dir =
      (root / (!fs::is_directory(root / "vae") && fs::is_directory(root / "video_vae") ? "video_vae" : "vae"))
          .string();
  // The partition's tasks first: they say whether transformer/ is Ref2VA's (a native Ref2VA/).
  m.tasks = read_tasks(idx, index);
  const bool native_ref2va = std::find(m.tasks.begin(), m.tasks.end(), "ref2va") != m.tasks.end();
  if (ref2va && !native_ref2va) {
    // The diffusers layout keeps Ref2VA's DiT beside FL2VA's, as transformer_ref/.
    if (!idx.contains("transformer_ref") || !fs::is_regular_file(root / "transformer_ref" / "config.json")) {
      throw Error(ErrorKind::kNotFound,
                  dir +
                      " has no Ref2VA DiT, which reference-conditioned requests need: the diffusers layout "
                      "keeps it in transformer_ref/ (listed in model_index.json), a native Ref2VA/ partition "
                      "lists \"ref2va\" in model_index.json's \"_minimax_h3\" tasks");
    }
    m.transformer_dir = (root / "transformer_ref").string();
    m.tasks = {"ref2va"};
  }
  m.ref2va = ref2va || native_ref2va;
  if (!fs::is_regular_file(fs::path(m.transformer_dir) / "config.json")) {
    throw Error(ErrorKind::kNotFound, (fs::path(m.transformer_dir) / "config.json").string() +
                                          ": missing (the DiT's config; the release "
                                          "layout keeps it in transformer/)");
  }
  m.dit = dit::DitConfig::load(m.transformer_dir);
  m.vae = vae::find_vae(m.vae_dir).config;

  // The engine's frame arithmetic (17n+5 <-> 5n+2, 16 px per latent) and the DiT's input width
  // assume the released VAE geometry: check it instead of producing mis-sized video.
  const std::string pair = " (" + m.transformer_dir + "/config.json vs " + m.vae_dir + "/config.json)";
  if (m.vae.latent_channels != m.dit.in_channels) {
    throw Error(ErrorKind::kMismatch, "the VAE has " + std::to_string(m.vae.latent_channels) +
                                          " latent channels but the transformer takes " +
                                          std::to_string(m.dit.in_channels) + pair);
  }
  if (m.vae.patch_size != dit::kVaeSpatialRatio || m.vae.patch_size_t != dit::kFramesPerLatent ||
      m.vae.clip_length != dit::kChunkFrames || m.vae.token_drop != dit::kDroppedLatents) {
    throw Error(ErrorKind::kMismatch,
                m.vae_dir + "/config.json: the engine needs the released VAE geometry (" +
                    std::to_string(dit::kVaeSpatialRatio) + " px and " +
                    std::to_string(dit::kFramesPerLatent) + " frames per latent, clip_length " +
                    std::to_string(dit::kChunkFrames) + ", token_drop " +
                    std::to_string(dit::kDroppedLatents) + ")");
  }
  if (m.dit.patch[0] != 1 || m.dit.patch[1] != 2 || m.dit.patch[2] != 2) {
    throw Error(ErrorKind::kMismatch,
                m.transformer_dir + "/config.json: the engine needs patch_size [1, 2, 2]");
  }

  const fs::path te = root / "text_encoder";
  if (fs::is_directory(te)) {
    m.text_encoder_dir = te.string();
    text::refuse_byte_encoder(m.text_encoder_dir);
    m.prompt_encoder = text::has_prompt_encoder(dir);
    if (m.prompt_encoder) {
      try {
        m.vision = text::VisionConfig::load(m.text_encoder_dir);
      } catch (const Error& e) {
        m.vision_missing = e.what();  // a T2VA model: FL2VA says so when asked for
      }
    }
  }
  const fs::path audio_vae = root / "audio_vae";
  if (fs::is_directory(audio_vae)) {
    m.audio_vae_dir = audio_vae.string();
    try {
      const audio::AudioVaeConfig a = audio::find_audio_vae(m.audio_vae_dir).config;
      m.audio_rate = a.sample_rate;
      m.audio_hop = a.hop();
      m.audio_context_latents = a.context_latents();
      m.audio_encoder_dim = a.encoder_dim;
      m.audio_encoder_params = audio::encoder_parameters(a);
    } catch (const std::exception&) {
      // Left 0: a request with audio loads the decoder first, and that load names the problem.
    }
  }
  m.video_shift = read_shift(root / "scheduler", dit::kVideoShift);
  m.audio_shift = read_shift(root / "audio_scheduler", dit::kAudioShift);

  if (idx.contains("gst_h3")) {
    const json& d = idx["gst_h3"];
    if (!d.is_object()) throw Error(ErrorKind::kFormat, index.string() + ": \"gst_h3\" must be an object");
    m.defaults.width = default_field(d, "default_width", m.defaults.width, index);
    m.defaults.height = default_field(d, "default_height", m.defaults.height, index);
    m.defaults.num_frames = default_field(d, "default_frames", m.defaults.num_frames, index);
    m.defaults.steps = default_field(d, "default_steps", m.defaults.steps, index);
    m.defaults.reference_short_edge =
        default_field(d, "reference_short_edge", m.defaults.reference_short_edge, index);
  }
  return m;
}

void require_audio_vae(const ModelInfo& m) {
  if (!m.audio_vae_dir.empty()) return;
  throw Error(ErrorKind::kNotFound,
              (fs::path(m.dir) / "audio_vae").string() +
                  ": the model folder has no audio VAE, so it cannot make a "
                  "soundtrack; ask for video only, or use a model folder with audio_vae/");
}

namespace {

std::string task_list(const ModelInfo& m) {
  std::string list;
  for (const auto& t : m.tasks) list += (list.empty() ? "" : ", ") + t;
  return "[" + list + "]";
}

// What FL2VA and Ref2VA both need beside their DiT: the VAE's encoder for the pictures' latents
// and, unless the presentation comes as embeddings, the vision tower that sees them.
std::string encoders_missing(const ModelInfo& m, bool embeddings, const std::string& task,
                             const std::string& pictures) {
  try {
    const vae::VaeSource src = vae::find_vae(m.vae_dir);
    const io::Weights w = io::Weights::open(
        src.weights_path, {io::ModelKind::kVideoVae, src.config.num_heads, src.config.head_dim});
    if (!w.contains("encoder.conv_in.weight")) {
      return w.path() + ": the video VAE checkpoint holds no encoder (encoder.conv_in.weight), which " +
             task + " needs to turn the " + pictures +
             " into latents (the release's vae/, FL2VA/video_vae/ and Ref2VA/video_vae/ hold one)";
    }
  } catch (const Error& e) {
    return e.what();
  }
  if (!embeddings) {
    if (!m.prompt_encoder) {
      return m.dir + " has no Qwen3-VL text encoder (text_encoder/ and tokenizer/): " + task +
             " presents the " + pictures +
             " to it beside the prompt; give precomputed embeddings of that presentation instead";
    }
    if (!m.vision)
      return m.vision_missing + ": " + task + "'s vision tower sees the " + pictures + " beside the prompt";
  }
  return {};
}

}  // namespace

std::string fl2va_missing(const ModelInfo& m, bool embeddings) {
  const std::string index = (fs::path(m.dir) / "model_index.json").string();
  if (!m.tasks.empty() && std::find(m.tasks.begin(), m.tasks.end(), "fl2va") == m.tasks.end()) {
    return index + " lists the tasks " + task_list(m) +
           ": this checkpoint has no keyframe condition path (the release's FL2VA/ partition and its "
           "diffusers transformer/ have one)";
  }
  return encoders_missing(m, embeddings, "FL2VA", "keyframes");
}

std::string ref2va_missing(const ModelInfo& m, bool embeddings) {
  if (!m.ref2va) {
    return m.transformer_dir +
           " is not Ref2VA's DiT: references need the engine opened with ref2va, which reads the diffusers "
           "layout's transformer_ref/ (h3 generate --reference and the elements' references do so "
           "themselves), or a native Ref2VA/ partition";
  }
  return encoders_missing(m, embeddings, "Ref2VA", "references");
}

std::string task_missing(const ModelInfo& m, const TaskAsk& ask) {
  const bool embeddings = ask.embeddings;
  if (ask.references) return ref2va_missing(m, embeddings);
  const bool keyframes = ask.first_frame || ask.last_frame;
  const char* task = keyframes ? "fl2va" : "t2va";
  if (m.ref2va && std::find(m.tasks.begin(), m.tasks.end(), task) == m.tasks.end()) {
    return m.transformer_dir + " is Ref2VA's DiT (tasks " + task_list(m) +
           "), which serves requests with references only: give references, or open the engine without "
           "ref2va for " +
           (keyframes ? "first-frame / last-frame (FL2VA)" : "a prompt alone (T2VA)");
  }
  return keyframes ? fl2va_missing(m, embeddings) : std::string();
}

void check_task(const ModelInfo& m, const TaskAsk& ask) {
  const std::string why = task_missing(m, ask);
  if (why.empty()) return;
  const std::string asked = ask.references    ? "references ask for Ref2VA (reference to video)"
                            : ask.first_frame ? "first-frame asks for FL2VA (image to video)"
                            : ask.last_frame  ? "last-frame asks for FL2VA (image to video)"
                                              : "a request without references asks for T2VA";
  throw Error(ErrorKind::kInvalidArgument, asked + ", which this model cannot do: " + why);
}

}  // namespace h3
