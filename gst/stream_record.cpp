#include "stream_record.h"

#include <glib.h>

#include "h3/model_clock.h"
#include "h3/model_lora.h"
#include "marking/model_digest.h"

namespace h3gst {
namespace {

std::string basename_of(const std::string& path) {
  gchar* b = g_path_get_basename(path.c_str());
  std::string s = b;
  g_free(b);
  return s;
}

}  // namespace

void StreamRecord::begin(const Settings& s, const std::string& element, const h3::ClipPlan& plan,
                         const std::string& model_dir, gint fps_n, gint fps_d, bool audio) {
  h3::marking::Record r;
  r.generator = std::string("gst-h3 ") + VERSION;
  r.element = element;
  r.model_name = basename_of(model_dir);
  r.model_sha256 = h3::marking::model_sha256(model_dir);
  if (s.embeds.empty()) {
    r.prompt = s.prompt;
  } else {
    r.prompt_embeds = basename_of(s.embeds);
  }
  if (!s.first_frame.empty()) r.conditioning.push_back("first-frame " + s.first_frame);
  if (!s.last_frame.empty()) r.conditioning.push_back("last-frame " + s.last_frame);
  for (const std::string& ref : s.references) r.conditioning.push_back("reference " + ref);
  r.seed = s.seed;
  r.sampler = h3::to_string(plan.sampler);
  r.width = plan.width;
  r.height = plan.height;
  r.num_frames = plan.endless ? -1 : plan.num_frames;
  r.steps = plan.steps;
  r.fps_n = fps_n;
  r.fps_d = fps_d;
  r.sink = s.sink;
  r.window = s.window;
  r.positions = h3::to_string(s.positions);
  r.prompt_switch = h3::to_string(s.prompt_switch);
  if (s.lora == h3::kNoLora) {
    // No adapter at all (not the model's own causal adapter either): a name without a file.
    r.lora_name = h3::kNoLora;
  } else if (!s.lora.empty()) {
    r.lora_name = basename_of(s.lora);
    r.lora_sha256 = h3::marking::model_sha256(s.lora);
  }
  r.compute_dtype = s.compute_dtype;
  r.device = s.device;
  r.ranks = s.rendezvous.empty() ? s.ranks : s.world_size;
  r.tp = s.tp;
  r.sp = s.sp;
  r.adaln_tables = s.adaln_tables;
  r.audio = audio;
  std::lock_guard<std::mutex> lock(mutex_);
  record_ = std::move(r);
  have_ = true;
}

void StreamRecord::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  have_ = false;
  record_ = {};
}

void StreamRecord::changed(int64_t chunk, const std::string& prompt) {
  std::lock_guard<std::mutex> lock(mutex_);
  h3::marking::PromptChange c;
  c.chunk = chunk;
  c.first_frame = h3::dit::chunk_first_frame(chunk);
  c.seconds = h3::dit::chunk_start_seconds(chunk);
  c.prompt = prompt;
  record_.changes.push_back(std::move(c));
}

void StreamRecord::restart() {
  std::lock_guard<std::mutex> lock(mutex_);
  record_.changes.clear();
}

bool StreamRecord::have() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return have_;
}

h3::marking::Record StreamRecord::get() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return record_;
}

std::string StreamRecord::json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return have_ ? h3::marking::to_json(record_) : std::string();
}

std::string StreamRecord::prompt_at(int64_t chunk) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string p = record_.prompt;
  for (const h3::marking::PromptChange& c : record_.changes) {
    if (c.chunk <= chunk) p = c.prompt;
  }
  return p;
}

}  // namespace h3gst
