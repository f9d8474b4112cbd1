// h3videosrc's properties: their values (Settings), their GParamSpecs, and how a
// copy of them becomes the engine's options and request. The ranges and defaults
// that the engine also checks are the engine's own (include/h3/limits.h).
#pragma once

#include <glib-object.h>

#include <string>
#include <vector>

#include "h3/limits.h"
#include "h3/options.h"
#include "h3/request.h"

namespace h3gst {

// The element's spelling of "the model's default" for width, height, num-frames
// and steps. The engine's is 0 (h3::GenerationRequest); the element keeps -1 so
// that an explicit 0 is reported as a mistake instead of applied as a default.
constexpr gint kModelDefault = -1;
// One the embedded default model draws (its world: README.md, train/tiny/README.md).
constexpr const char* kDefaultPrompt = "a red circle moving right on a black background";
constexpr gint kDefaultQueueChunks = 2, kMaxQueueChunks = 64;
constexpr guint kMaxTimeoutSeconds = 3600;

// The `sampler` property's type (GstH3Sampler): h3::Sampler's values, under their names.
GType sampler_get_type();
// The `positions` (GstH3Positions) and `prompt-switch` (GstH3PromptSwitch) properties' types:
// h3::CausalPositions' and h3::PromptSwitch's values, under their names.
GType positions_get_type();
GType prompt_switch_get_type();

// The `pace` property (GstH3Pace, docs/element.md "Keeping pace"): off, or a live causal stream
// that lowers its forwards per chunk (not below kPaceMinSteps) when it falls behind real time and
// raises them again when it has caught up (pace_policy.h).
enum class Pace { kOff, kSteps };
GType pace_get_type();
constexpr gint kPaceMinSteps = 2;

struct Settings {
  std::string model;  // empty: the engine module's default model
  std::string prompt = kDefaultPrompt;
  std::string embeds;
  guint64 seed = 0;
  gint steps = kModelDefault;
  gint width = kModelDefault, height = kModelDefault;
  gint num_frames = kModelDefault;
  gint fps_n = 0, fps_d = 1;  // 0/1: the model's rate
  gint ranks = 1, tp = 0, sp = 1;
  std::string device = "cpu";
  gint queue_chunks = kDefaultQueueChunks;
  gboolean live = FALSE;
  guint timeout_s = static_cast<guint>(h3::kDefaultTimeout.count());
  gboolean free_text_encoder = FALSE;
  gboolean adaln_tables = TRUE;
  std::string compute_dtype;  // empty: the device's default (fp32 on cpu, bf16 on cuda)
  // Ranks in other processes (docs/distributed.md): empty keeps the thread ranks.
  std::string rendezvous;
  gint world_size = 2;
  std::string token_file;
  guint64 max_memory = 0;     // bytes a request may take beside the weights; 0: what is available
  guint64 device_memory = 0;  // bytes of each rank's device for the fit planner; 0: the GPU's (cuda)
  // The sampler (docs/causal.md): how the clip is synthesised.
  h3::Sampler sampler = h3::Sampler::kEuler;
  std::string lora;             // a PEFT LoRA on the DiT; empty: none
  std::string prompt_timeline;  // a file of `SECONDS PROMPT` lines; empty: none
  gint sink = static_cast<gint>(h3::kDefaultSink), window = static_cast<gint>(h3::kDefaultWindow);
  Pace pace = Pace::kOff;
  h3::CausalPositions positions = h3::CausalPositions::kAuto;
  h3::PromptSwitch prompt_switch = h3::PromptSwitch::kKeep;
  // FL2VA keyframes: a file or URI each (docs/element.md); empty: none.
  std::string first_frame, last_frame;
  // Ref2VA image references, in the order the model reads them: a file or URI each; empty: none.
  std::vector<std::string> references;
  // Elements whose engine options agree share one engine unless their groups differ.
  std::string engine_group;
};

enum Property {
  PROP_0,
  PROP_MODEL,
  PROP_PROMPT,
  PROP_PROMPT_EMBEDS,
  PROP_SEED,
  PROP_STEPS,
  PROP_WIDTH,
  PROP_HEIGHT,
  PROP_NUM_FRAMES,
  PROP_FRAMERATE,
  PROP_RANKS,
  PROP_TP_SIZE,
  PROP_SP_SIZE,
  PROP_DEVICE,
  PROP_QUEUE_CHUNKS,
  PROP_IS_LIVE,
  PROP_TIMEOUT,
  PROP_FREE_TEXT_ENCODER,
  PROP_ADALN_TABLES,
  PROP_COMPUTE_DTYPE,
  PROP_RENDEZVOUS,
  PROP_WORLD_SIZE,
  PROP_TOKEN_FILE,
  PROP_MAX_MEMORY,
  PROP_DEVICE_MEMORY,
  PROP_SAMPLER,
  PROP_LORA,
  PROP_SINK,
  PROP_WINDOW,
  PROP_PROMPT_TIMELINE,
  PROP_FIRST_FRAME,
  PROP_LAST_FRAME,
  PROP_REFERENCES,
  PROP_ENGINE_GROUP,
  PROP_PACE,
  PROP_POSITIONS,
  PROP_PROMPT_SWITCH,
};

// Whether property `id` is part of the engine an element shares (its options, LoRA and group):
// changing it on an element holding an engine another element plays on is refused.
bool engine_property(guint id);

void install_properties(GObjectClass* klass);
// false: `id` is not one of the properties.
bool set_property(Settings* s, guint id, const GValue* value);
bool get_property(const Settings& s, guint id, GValue* value);

// The name of a width/height/num-frames/steps property set to 0, or nullptr.
const char* explicit_zero(const Settings& s);
// The engine's request and options for a copy taken at start (-1 becomes 0, but num-frames -1
// with sampler=causal an endless stream). Throws h3::Error for a prompt timeline file that
// cannot be read or parsed.
h3::GenerationRequest to_request(const Settings& s);
h3::EngineOptions to_engine_options(const Settings& s);
// Decodes first-frame, last-frame and references (when set) into `r` with GStreamer
// (pictures/picture_file.h). `default_frames`: the model's default clip length (the engine
// module's check_task says it), what a video reference is read for when num-frames is the model's.
// Throws h3::Error naming the property and the file: kNotFound, or kInvalidArgument for a file that
// holds no picture GStreamer can decode or one too small or too large.
void read_pictures(const Settings& s, int64_t default_frames, h3::GenerationRequest& r);

}  // namespace h3gst
