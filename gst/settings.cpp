#include "settings.h"

#include <gst/gst.h>

#include <algorithm>
#include <chrono>
#include <tuple>

#include "h3/model_clock.h"
#include "h3/prompt_timeline.h"
#include "pictures/picture_file.h"

namespace h3gst {
namespace {

constexpr auto kReady =
    static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);

// The model and what to generate with it.
void install_request_properties(GObjectClass* klass) {
  const Settings d;
  g_object_class_install_property(
      klass, PROP_MODEL,
      g_param_spec_string("model", "Model",
                          "Model folder in the H3 release layout (model_index.json, transformer/, vae/); "
                          "unset: the installed tiny model, or $H3_MODEL_DIR",
                          nullptr, kReady));
  g_object_class_install_property(
      klass, PROP_PROMPT,
      g_param_spec_string(
          "prompt", "Prompt",
          "Text prompt (for models with a text encoder); ignored beside prompt-embeds. A sampler=causal "
          "stream takes a new one while playing",
          kDefaultPrompt,
          static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING)));
  g_object_class_install_property(
      klass, PROP_PROMPT_TIMELINE,
      g_param_spec_string(
          "prompt-timeline", "Prompt timeline",
          "sampler=causal: a file of `SECONDS PROMPT` lines, prompts that take over at those times "
          "into the stream",
          nullptr, kReady));
  g_object_class_install_property(
      klass, PROP_PROMPT_EMBEDS,
      g_param_spec_string("prompt-embeds", "Prompt embeddings",
                          "Safetensors file of precomputed prompt embeddings (h3 encode-prompt writes "
                          "one); takes the place of the prompt",
                          nullptr, kReady));
  g_object_class_install_property(
      klass, PROP_SEED,
      g_param_spec_uint64("seed", "Seed",
                          "Seed of the initial noise: the same request and seed give the same frames", 0,
                          G_MAXUINT64, d.seed, kReady));
  g_object_class_install_property(
      klass, PROP_STEPS,
      g_param_spec_int("steps", "Steps",
                       "Denoising grid points N (N-1 model evaluations), at least 2; sampler=causal: "
                       "forwards per chunk; -1: the model's default",
                       kModelDefault, static_cast<gint>(h3::kMaxSteps), d.steps, kReady));
  g_object_class_install_property(
      klass, PROP_SAMPLER,
      g_param_spec_enum("sampler", "Sampler",
                        "How the clip is synthesised: euler over the whole clip, or causal, chunk by "
                        "chunk, each decoded at once",
                        sampler_get_type(), static_cast<gint>(d.sampler), kReady));
  g_object_class_install_property(
      klass, PROP_PACE,
      g_param_spec_enum("pace", "Pace",
                        "sampler=causal: steps lowers the forwards per chunk (down to 2) while the stream "
                        "is late, raises them once caught up; posts h3-pace",
                        pace_get_type(), static_cast<gint>(d.pace), kReady));
  g_object_class_install_property(
      klass, PROP_LORA,
      g_param_spec_string("lora", "LoRA",
                          "A PEFT LoRA on the DiT (file or folder); unset, an endless sampler=causal stream "
                          "takes the model's own causal-lora/; \"none\": no adapter",
                          nullptr, kReady));
  for (auto [id, name, nick, blurb] :
       {std::tuple<Property, const char*, const char*, const char*>{
            PROP_FIRST_FRAME, "first-frame", "First frame",
            "FL2VA: a picture (file or URI) the clip starts from; needs a model with FL2VA's condition "
            "path and sampler=euler"},
        {PROP_LAST_FRAME, "last-frame", "Last frame",
         "FL2VA: a picture (file or URI) the clip ends on, as first-frame"}}) {
    g_object_class_install_property(klass, id, g_param_spec_string(name, nick, blurb, nullptr, kReady));
  }
  // An array of strings, which gst-launch sets as references="<a.png,b.jpg>" (GStreamer 1.22
  // cannot deserialise a GStrv property).
  g_object_class_install_property(
      klass, PROP_REFERENCES,
      gst_param_spec_array(
          "references", "References",
          "Ref2VA: up to 9 images, 3 videos and 3 sounds (files or URIs) in the model's order; "
          "gst-launch: references=\"<a.png,b.mp4,c.wav>\"",
          g_param_spec_string("reference", "Reference", "A reference: a picture, video or sound file or URI",
                              nullptr, static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS)),
          kReady));
  g_object_class_install_property(
      klass, PROP_SINK,
      g_param_spec_int("sink", "KV-cache sink",
                       "sampler=causal: KV-cache records pinned from the start, the prompt being the first "
                       "(2 also pins the first chunk)",
                       static_cast<gint>(h3::kMinSink), static_cast<gint>(h3::kMaxSink), d.sink, kReady));
  g_object_class_install_property(
      klass, PROP_WINDOW,
      g_param_spec_int(
          "window", "KV-cache window",
          "sampler=causal: the most recent chunks kept in the KV cache beside the sink; -1: every chunk "
          "(memory grows)",
          static_cast<gint>(h3::kMinWindow), static_cast<gint>(h3::kMaxWindow), d.window, kReady));
  g_object_class_install_property(
      klass, PROP_POSITIONS,
      g_param_spec_enum("positions", "Positions",
                        "sampler=causal: relative keeps a long stream's positions within the trained length "
                        "(window moved back); auto: relative when endless",
                        positions_get_type(), static_cast<gint>(d.positions), kReady));
  g_object_class_install_property(
      klass, PROP_PROMPT_SWITCH,
      g_param_spec_enum(
          "prompt-switch", "Prompt switch",
          "sampler=causal: at a prompt change the kept chunks' KV records carry over (keep) or are "
          "recomputed under the new prompt (recache)",
          prompt_switch_get_type(), static_cast<gint>(d.prompt_switch), kReady));
  g_object_class_install_property(
      klass, PROP_WIDTH,
      g_param_spec_int("width", "Width", "Frame width in pixels, at least 16; -1: the model's default",
                       kModelDefault, static_cast<gint>(h3::kMaxSide), d.width, kReady));
  g_object_class_install_property(
      klass, PROP_HEIGHT,
      g_param_spec_int("height", "Height", "Frame height in pixels, at least 16; -1: the model's default",
                       kModelDefault, static_cast<gint>(h3::kMaxSide), d.height, kReady));
  g_object_class_install_property(
      klass, PROP_NUM_FRAMES,
      g_param_spec_int(
          "num-frames", "Number of frames",
          "Frames in the clip (exactly); -1: the model's default, and with sampler=causal an endless "
          "stream (until EOS)",
          kModelDefault, static_cast<gint>(h3::kMaxFrames), d.num_frames, kReady));
  g_object_class_install_property(
      klass, PROP_FRAMERATE,
      gst_param_spec_fraction(
          "framerate", "Frame rate",
          "Frame rate stamped on the frames; 0/1: the model's rate (24/1 for the H3 release)", 0, 1, 1000, 1,
          d.fps_n, d.fps_d, kReady));
}

// Where the engine runs, and how the stream behaves.
void install_engine_properties(GObjectClass* klass) {
  const Settings d;
  g_object_class_install_property(
      klass, PROP_RANKS,
      g_param_spec_int(
          "ranks", "Ranks",
          "Engine ranks, threads of this process (device=cuda: one GPU each); 1 with rendezvous, "
          "whose world is world-size",
          h3::kMinRanks, h3::kMaxRanks, d.ranks, kReady));
  g_object_class_install_property(
      klass, PROP_TP_SIZE,
      g_param_spec_int("tp-size", "Tensor-parallel size",
                       "Ranks that split each transformer layer's weights (tensor parallelism): tp-size x "
                       "sp-size = ranks; 0: ranks / sp-size",
                       0, h3::kMaxRanks, d.tp, kReady));
  g_object_class_install_property(
      klass, PROP_SP_SIZE,
      g_param_spec_int("sp-size", "Sequence-parallel size",
                       "Ranks that split the transformer's rows (Ulysses sequence parallelism); must divide "
                       "the ranks and each tensor-parallel rank's heads",
                       1, h3::kMaxRanks, d.sp, kReady));
  g_object_class_install_property(
      klass, PROP_DEVICE,
      g_param_spec_string("device", "Device",
                          "Where the ranks compute: \"cpu\", or \"cuda\" (rank r on GPU r, NCCL between "
                          "ranks; needs a CUDA build and one GPU per rank)",
                          d.device.c_str(), kReady));
  g_object_class_install_property(
      klass, PROP_QUEUE_CHUNKS,
      g_param_spec_int("queue-chunks", "Queued chunks",
                       "Decoded chunks that may wait downstream before the engine is held (0: one, and "
                       "live streams begin each chunk just in time)",
                       0, kMaxQueueChunks, d.queue_chunks, kReady));
  g_object_class_install_property(
      klass, PROP_IS_LIVE,
      g_param_spec_boolean("is-live", "Is live",
                           "Act as a live source: produce in PLAYING only, paced to the clock (for RTP "
                           "streaming); latency: a chunk's time",
                           d.live, kReady));
  g_object_class_install_property(
      klass, PROP_TIMEOUT,
      g_param_spec_uint("timeout", "Collective timeout",
                        "Seconds a rank may wait for a peer that shows no sign of life before the request "
                        "fails (waiting for a stalled downstream is not limited)",
                        1, kMaxTimeoutSeconds, d.timeout_s, kReady));
  g_object_class_install_property(
      klass, PROP_FREE_TEXT_ENCODER,
      g_param_spec_boolean("free-text-encoder", "Free the text encoder",
                           "Drop the text encoder's weights once a prompt is encoded (the next prompt reads "
                           "them again), leaving the memory to the DiT",
                           d.free_text_encoder, kReady));
  g_object_class_install_property(
      klass, PROP_ADALN_TABLES,
      g_param_spec_boolean("adaln-tables", "AdaLN tables",
                           "Compute the DiT's AdaLN rows once per timestep grid and drop its AdaLN "
                           "projections; the same output bit for bit",
                           d.adaln_tables, kReady));
  g_object_class_install_property(
      klass, PROP_COMPUTE_DTYPE,
      g_param_spec_string("compute-dtype", "Compute dtype",
                          "Precision of the DiT and the text encoder: \"fp32\" or \"bf16\" (the VAEs stay "
                          "fp32); unset: fp32 on cpu, bf16 on cuda",
                          nullptr, kReady));
  g_object_class_install_property(
      klass, PROP_RENDEZVOUS,
      g_param_spec_string(
          "rendezvous", "Rendezvous",
          "host:port where this element serves the rendezvous as rank 0 of world-size ranks, the others "
          "`h3 worker` processes; empty: thread ranks",
          nullptr, kReady));
  g_object_class_install_property(
      klass, PROP_WORLD_SIZE,
      g_param_spec_int("world-size", "World size",
                       "With rendezvous: every rank, this element's rank 0 included", 2, h3::kMaxRanks,
                       d.world_size, kReady));
  g_object_class_install_property(
      klass, PROP_TOKEN_FILE,
      g_param_spec_string("token-file", "Token file",
                          "With rendezvous: the shared token workers must present, in a file only its "
                          "owner may read (chmod 600)",
                          nullptr, kReady));
  g_object_class_install_property(
      klass, PROP_MAX_MEMORY,
      g_param_spec_uint64("max-memory", "Max memory",
                          "Bytes the engine's requests may hold together beside the weights (0: what is "
                          "available); see docs/element.md",
                          0, G_MAXINT64, d.max_memory, kReady));
  g_object_class_install_property(
      klass, PROP_DEVICE_MEMORY,
      g_param_spec_uint64("device-memory", "Device memory",
                          "Bytes of each rank's device: a layout that cannot fit is refused before the "
                          "model loads; 0: on cuda the GPU's, on cpu no check",
                          0, G_MAXINT64, d.device_memory, kReady));
  g_object_class_install_property(
      klass, PROP_ENGINE_GROUP,
      g_param_spec_string("engine-group", "Engine group",
                          "Elements whose engine options and lora agree share one loaded engine unless their "
                          "engine-groups differ; unset: the default group",
                          nullptr, kReady));
}

std::string string_or_empty(const GValue* value) {
  const gchar* s = g_value_get_string(value);
  return s ? s : "";
}

void set_string_or_null(GValue* value, const std::string& s) {
  g_value_set_string(value, s.empty() ? nullptr : s.c_str());
}

}  // namespace

GType sampler_get_type() {
  static gsize type = 0;
  static const GEnumValue values[] = {
      {static_cast<gint>(h3::Sampler::kEuler), "The release's flow-matching sampler over the whole clip",
       h3::to_string(h3::Sampler::kEuler)},
      {static_cast<gint>(h3::Sampler::kCausal),
       "RAVEN-Streaming's chunk-causal sampler: chunks synthesised and decoded one after another",
       h3::to_string(h3::Sampler::kCausal)},
      {0, nullptr, nullptr},
  };
  if (g_once_init_enter(&type)) g_once_init_leave(&type, g_enum_register_static("GstH3Sampler", values));
  return static_cast<GType>(type);
}

GType pace_get_type() {
  static gsize type = 0;
  static const GEnumValue values[] = {
      {static_cast<gint>(Pace::kOff), "The stream keeps its steps", "off"},
      {static_cast<gint>(Pace::kSteps),
       "Fewer forwards per chunk while the stream falls behind real time, more once it has caught up",
       "steps"},
      {0, nullptr, nullptr},
  };
  if (g_once_init_enter(&type)) g_once_init_leave(&type, g_enum_register_static("GstH3Pace", values));
  return static_cast<GType>(type);
}

GType positions_get_type() {
  static gsize type = 0;
  static const GEnumValue values[] = {
      {static_cast<gint>(h3::CausalPositions::kAuto), "Relative for an endless stream, absolute for a clip",
       h3::to_string(h3::CausalPositions::kAuto)},
      {static_cast<gint>(h3::CausalPositions::kAbsolute), "Every chunk at its own place on the media clock",
       h3::to_string(h3::CausalPositions::kAbsolute)},
      {static_cast<gint>(h3::CausalPositions::kRelative),
       "The window and the current chunk moved back once the stream passes the model's trained length",
       h3::to_string(h3::CausalPositions::kRelative)},
      {0, nullptr, nullptr},
  };
  if (g_once_init_enter(&type)) g_once_init_leave(&type, g_enum_register_static("GstH3Positions", values));
  return static_cast<GType>(type);
}

GType prompt_switch_get_type() {
  static gsize type = 0;
  static const GEnumValue values[] = {
      {static_cast<gint>(h3::PromptSwitch::kKeep), "The kept chunks' KV records carry over as they were",
       h3::to_string(h3::PromptSwitch::kKeep)},
      {static_cast<gint>(h3::PromptSwitch::kRecache),
       "The kept chunks' KV records are recomputed under the new prompt",
       h3::to_string(h3::PromptSwitch::kRecache)},
      {0, nullptr, nullptr},
  };
  if (g_once_init_enter(&type)) g_once_init_leave(&type, g_enum_register_static("GstH3PromptSwitch", values));
  return static_cast<GType>(type);
}

void install_properties(GObjectClass* klass) {
  install_request_properties(klass);
  install_engine_properties(klass);
}

bool set_property(Settings* s, guint id, const GValue* value) {
  switch (id) {
    case PROP_MODEL: s->model = string_or_empty(value); break;
    case PROP_PROMPT: s->prompt = string_or_empty(value); break;
    case PROP_PROMPT_EMBEDS: s->embeds = string_or_empty(value); break;
    case PROP_SEED: s->seed = g_value_get_uint64(value); break;
    case PROP_STEPS: s->steps = g_value_get_int(value); break;
    case PROP_WIDTH: s->width = g_value_get_int(value); break;
    case PROP_HEIGHT: s->height = g_value_get_int(value); break;
    case PROP_NUM_FRAMES: s->num_frames = g_value_get_int(value); break;
    case PROP_FRAMERATE:
      s->fps_n = gst_value_get_fraction_numerator(value);
      s->fps_d = gst_value_get_fraction_denominator(value);
      break;
    case PROP_RANKS: s->ranks = g_value_get_int(value); break;
    case PROP_TP_SIZE: s->tp = g_value_get_int(value); break;
    case PROP_SP_SIZE: s->sp = g_value_get_int(value); break;
    case PROP_DEVICE: s->device = string_or_empty(value); break;
    case PROP_QUEUE_CHUNKS: s->queue_chunks = g_value_get_int(value); break;
    case PROP_IS_LIVE: s->live = g_value_get_boolean(value); break;
    case PROP_TIMEOUT: s->timeout_s = g_value_get_uint(value); break;
    case PROP_FREE_TEXT_ENCODER: s->free_text_encoder = g_value_get_boolean(value); break;
    case PROP_ADALN_TABLES: s->adaln_tables = g_value_get_boolean(value); break;
    case PROP_COMPUTE_DTYPE: s->compute_dtype = string_or_empty(value); break;
    case PROP_RENDEZVOUS: s->rendezvous = string_or_empty(value); break;
    case PROP_WORLD_SIZE: s->world_size = g_value_get_int(value); break;
    case PROP_TOKEN_FILE: s->token_file = string_or_empty(value); break;
    case PROP_MAX_MEMORY: s->max_memory = g_value_get_uint64(value); break;
    case PROP_DEVICE_MEMORY: s->device_memory = g_value_get_uint64(value); break;
    case PROP_SAMPLER: s->sampler = static_cast<h3::Sampler>(g_value_get_enum(value)); break;
    case PROP_PACE: s->pace = static_cast<Pace>(g_value_get_enum(value)); break;
    case PROP_LORA: s->lora = string_or_empty(value); break;
    case PROP_ENGINE_GROUP: s->engine_group = string_or_empty(value); break;
    case PROP_SINK: s->sink = g_value_get_int(value); break;
    case PROP_WINDOW: s->window = g_value_get_int(value); break;
    case PROP_POSITIONS: s->positions = static_cast<h3::CausalPositions>(g_value_get_enum(value)); break;
    case PROP_PROMPT_SWITCH: s->prompt_switch = static_cast<h3::PromptSwitch>(g_value_get_enum(value)); break;
    case PROP_PROMPT_TIMELINE: s->prompt_timeline = string_or_empty(value); break;
    case PROP_FIRST_FRAME: s->first_frame = string_or_empty(value); break;
    case PROP_LAST_FRAME: s->last_frame = string_or_empty(value); break;
    case PROP_REFERENCES: {
      s->references.clear();
      for (guint i = 0; i < gst_value_array_get_size(value); ++i) {
        const GValue* v = gst_value_array_get_value(value, i);
        if (G_VALUE_HOLDS_STRING(v) && g_value_get_string(v))
          s->references.emplace_back(g_value_get_string(v));
      }
      break;
    }
    default: return false;
  }
  return true;
}

bool get_property(const Settings& s, guint id, GValue* value) {
  switch (id) {
    case PROP_MODEL: set_string_or_null(value, s.model); break;
    case PROP_PROMPT: g_value_set_string(value, s.prompt.c_str()); break;
    case PROP_PROMPT_EMBEDS: set_string_or_null(value, s.embeds); break;
    case PROP_SEED: g_value_set_uint64(value, s.seed); break;
    case PROP_STEPS: g_value_set_int(value, s.steps); break;
    case PROP_WIDTH: g_value_set_int(value, s.width); break;
    case PROP_HEIGHT: g_value_set_int(value, s.height); break;
    case PROP_NUM_FRAMES: g_value_set_int(value, s.num_frames); break;
    case PROP_FRAMERATE: gst_value_set_fraction(value, s.fps_n, s.fps_d); break;
    case PROP_RANKS: g_value_set_int(value, s.ranks); break;
    case PROP_TP_SIZE: g_value_set_int(value, s.tp); break;
    case PROP_SP_SIZE: g_value_set_int(value, s.sp); break;
    case PROP_DEVICE: g_value_set_string(value, s.device.c_str()); break;
    case PROP_QUEUE_CHUNKS: g_value_set_int(value, s.queue_chunks); break;
    case PROP_IS_LIVE: g_value_set_boolean(value, s.live); break;
    case PROP_TIMEOUT: g_value_set_uint(value, s.timeout_s); break;
    case PROP_FREE_TEXT_ENCODER: g_value_set_boolean(value, s.free_text_encoder); break;
    case PROP_ADALN_TABLES: g_value_set_boolean(value, s.adaln_tables); break;
    case PROP_COMPUTE_DTYPE: set_string_or_null(value, s.compute_dtype); break;
    case PROP_RENDEZVOUS: set_string_or_null(value, s.rendezvous); break;
    case PROP_WORLD_SIZE: g_value_set_int(value, s.world_size); break;
    case PROP_TOKEN_FILE: set_string_or_null(value, s.token_file); break;
    case PROP_MAX_MEMORY: g_value_set_uint64(value, s.max_memory); break;
    case PROP_DEVICE_MEMORY: g_value_set_uint64(value, s.device_memory); break;
    case PROP_SAMPLER: g_value_set_enum(value, static_cast<gint>(s.sampler)); break;
    case PROP_PACE: g_value_set_enum(value, static_cast<gint>(s.pace)); break;
    case PROP_LORA: set_string_or_null(value, s.lora); break;
    case PROP_ENGINE_GROUP: set_string_or_null(value, s.engine_group); break;
    case PROP_SINK: g_value_set_int(value, s.sink); break;
    case PROP_WINDOW: g_value_set_int(value, s.window); break;
    case PROP_POSITIONS: g_value_set_enum(value, static_cast<gint>(s.positions)); break;
    case PROP_PROMPT_SWITCH: g_value_set_enum(value, static_cast<gint>(s.prompt_switch)); break;
    case PROP_PROMPT_TIMELINE: set_string_or_null(value, s.prompt_timeline); break;
    case PROP_FIRST_FRAME: set_string_or_null(value, s.first_frame); break;
    case PROP_LAST_FRAME: set_string_or_null(value, s.last_frame); break;
    case PROP_REFERENCES: {
      for (const std::string& r : s.references) {
        GValue v = G_VALUE_INIT;
        g_value_init(&v, G_TYPE_STRING);
        g_value_set_string(&v, r.c_str());
        gst_value_array_append_and_take_value(value, &v);
      }
      break;
    }
    default: return false;
  }
  return true;
}

const char* explicit_zero(const Settings& s) {
  return s.width == 0        ? "width"
         : s.height == 0     ? "height"
         : s.num_frames == 0 ? "num-frames"
         : s.steps == 0      ? "steps"
                             : nullptr;
}

h3::GenerationRequest to_request(const Settings& s) {
  h3::GenerationRequest r;
  // The embeddings file is the encoded prompt: the engine takes one or the other.
  r.prompt = s.embeds.empty() ? s.prompt : std::string();
  r.embeds_path = s.embeds;
  r.width = std::max(0, s.width);
  r.height = std::max(0, s.height);
  r.num_frames = s.num_frames == kModelDefault && s.sampler == h3::Sampler::kCausal
                     ? h3::kEndless
                     : std::max(0, s.num_frames);
  r.steps = std::max(0, s.steps);
  r.seed = s.seed;
  r.sampler = s.sampler;
  r.lora = s.lora;
  r.sink = s.sink;
  r.window = s.window;
  // Pace: the engine keeps the grids of every count the stream may be lowered to.
  if (s.pace == Pace::kSteps) {
    r.min_steps = std::min<int64_t>(kPaceMinSteps, r.steps != 0 ? r.steps : h3::kDefaultCausalSteps);
  }
  r.positions = s.positions;
  r.prompt_switch = s.prompt_switch;
  if (!s.prompt_timeline.empty()) r.prompt_timeline = h3::read_prompt_timeline(s.prompt_timeline);
  return r;
}

void read_pictures(const Settings& s, int64_t default_frames, h3::GenerationRequest& r) {
  if (!s.first_frame.empty()) r.first_frame = h3::pictures::read_picture(s.first_frame, "first-frame");
  if (!s.last_frame.empty()) r.last_frame = h3::pictures::read_picture(s.last_frame, "last-frame");
  // A video reference is read as far as the clip can use it: num-frames, or the model's default.
  const double seconds = h3::dit::reference_read_seconds(s.num_frames > 0 ? s.num_frames : default_frames);
  for (size_t i = 0; i < s.references.size(); ++i) {
    r.references.push_back(h3::pictures::read_reference(
        s.references[i], "references: reference " + std::to_string(i + 1), seconds));
  }
}

bool engine_property(guint id) {
  switch (id) {
    case PROP_MODEL:
    case PROP_RANKS:
    case PROP_TP_SIZE:
    case PROP_SP_SIZE:
    case PROP_DEVICE:
    case PROP_TIMEOUT:
    case PROP_FREE_TEXT_ENCODER:
    case PROP_ADALN_TABLES:
    case PROP_COMPUTE_DTYPE:
    case PROP_RENDEZVOUS:
    case PROP_WORLD_SIZE:
    case PROP_TOKEN_FILE:
    case PROP_MAX_MEMORY:
    case PROP_DEVICE_MEMORY:
    case PROP_LORA:
    case PROP_REFERENCES:  // Ref2VA's DiT is another engine
    case PROP_ENGINE_GROUP: return true;
    default: return false;
  }
}

h3::EngineOptions to_engine_options(const Settings& s) {
  h3::EngineOptions o;
  o.model_dir = s.model;
  o.ranks = s.ranks;
  o.tp = s.tp;
  o.sp = s.sp;
  o.device = s.device;
  o.timeout = std::chrono::seconds(s.timeout_s);
  o.free_text_encoder = s.free_text_encoder;
  o.ref2va = !s.references.empty();  // references are Ref2VA's, whose DiT is transformer_ref/
  o.adaln_tables = s.adaln_tables;
  o.compute_dtype = s.compute_dtype;
  o.rendezvous = s.rendezvous;
  o.world_size = s.rendezvous.empty() ? 0 : s.world_size;
  o.token_file = s.token_file;
  o.max_memory = static_cast<int64_t>(s.max_memory);
  o.device_memory = static_cast<int64_t>(s.device_memory);
  return o;
}

}  // namespace h3gst
