/**
 * SECTION:element-h3videosrc
 * @title: h3videosrc
 *
 * Generates a video clip from a text prompt (or precomputed prompt
 * embeddings) with the MiniMax-H3 model and pushes it downstream as raw video.
 * The engine decodes the clip in temporal chunks; each chunk's frames go out the
 * moment the engine hands them over, so encoders and muxers work while later
 * chunks are still being decoded. A bounded queue of `queue-chunks` decoded
 * chunks applies back-pressure to the engine when downstream is slower.
 *
 * The engine loads when the element goes to PAUSED, off the state-change
 * thread, with GstProgress messages (`open`). During generation the element
 * posts `h3-progress` element messages (see docs/element.md).
 *
 * ## Example launch lines
 * |[
 * gst-launch-1.0 h3videosrc prompt="a paper boat on a lake" num-frames=73 ! videoconvert ! \
 *     video/x-raw,format=I420 ! x264enc ! mp4mux ! filesink location=clip.mp4
 * ]| Generates 73 frames with the installed tiny model and writes an H.264 MP4.
 * |[
 * gst-launch-1.0 h3videosrc seed=7 ! videoconvert ! autovideosink
 * ]| Shows a clip as it is generated.
 *
 * Since: 0.1
 */
#include "gsth3videosrc.h"

#include <gst/video/video.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "h3videosrc_private.h"

GST_DEBUG_CATEGORY(gst_h3_video_src_debug);
#define GST_CAT_DEFAULT gst_h3_video_src_debug

#define MAX_SIZE 16384
#define MAX_FRAMES 100000
#define MAX_STEPS 1000
#define MAX_RANKS 64

enum {
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
  PROP_DEVICE,
  PROP_QUEUE_CHUNKS,
  PROP_IS_LIVE,
  PROP_TIMEOUT,
};

#define H3_FORMATS "{ RGB, RGBA, BGRx, I420 }"

static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE(
    "src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS(GST_VIDEO_CAPS_MAKE(H3_FORMATS)));

#define gst_h3_video_src_parent_class parent_class
G_DEFINE_TYPE(GstH3VideoSrc, gst_h3_video_src, GST_TYPE_PUSH_SRC);
GST_ELEMENT_REGISTER_DEFINE(h3videosrc, "h3videosrc", GST_RANK_NONE, GST_TYPE_H3_VIDEO_SRC);

static void gst_h3_video_src_finalize(GObject* object);
static void gst_h3_video_src_set_property(GObject* object, guint prop_id, const GValue* value,
                                          GParamSpec* pspec);
static void gst_h3_video_src_get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec);
static GstStateChangeReturn gst_h3_video_src_change_state(GstElement* element, GstStateChange transition);
static gboolean gst_h3_video_src_send_event(GstElement* element, GstEvent* event);
static GstCaps* gst_h3_video_src_get_caps(GstBaseSrc* bsrc, GstCaps* filter);
static GstCaps* gst_h3_video_src_fixate(GstBaseSrc* bsrc, GstCaps* caps);
static gboolean gst_h3_video_src_set_caps(GstBaseSrc* bsrc, GstCaps* caps);
static gboolean gst_h3_video_src_decide_allocation(GstBaseSrc* bsrc, GstQuery* query);
static gboolean gst_h3_video_src_start(GstBaseSrc* bsrc);
static gboolean gst_h3_video_src_stop(GstBaseSrc* bsrc);
static gboolean gst_h3_video_src_unlock(GstBaseSrc* bsrc);
static gboolean gst_h3_video_src_unlock_stop(GstBaseSrc* bsrc);
static gboolean gst_h3_video_src_is_seekable(GstBaseSrc* bsrc);
static gboolean gst_h3_video_src_query(GstBaseSrc* bsrc, GstQuery* query);
static gboolean gst_h3_video_src_event(GstBaseSrc* bsrc, GstEvent* event);
static void gst_h3_video_src_get_times(GstBaseSrc* bsrc, GstBuffer* buffer, GstClockTime* start,
                                       GstClockTime* end);
static GstFlowReturn gst_h3_video_src_create(GstPushSrc* psrc, GstBuffer** buf);

static void gst_h3_video_src_class_init(GstH3VideoSrcClass* klass) {
  GObjectClass* gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  GstBaseSrcClass* basesrc_class = GST_BASE_SRC_CLASS(klass);
  GstPushSrcClass* pushsrc_class = GST_PUSH_SRC_CLASS(klass);

  GST_DEBUG_CATEGORY_INIT(gst_h3_video_src_debug, "h3videosrc", 0, "H3 video generator source");

  gobject_class->finalize = gst_h3_video_src_finalize;
  gobject_class->set_property = gst_h3_video_src_set_property;
  gobject_class->get_property = gst_h3_video_src_get_property;

  const auto ready =
      static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);

  /**
   * GstH3VideoSrc:model:
   *
   * The model folder. Since: 0.1
   */
  g_object_class_install_property(
      gobject_class, PROP_MODEL,
      g_param_spec_string("model", "Model",
                          "Model folder in the H3 release layout (model_index.json, transformer/, vae/). "
                          "Unset: the installed tiny model, or $H3_MODEL_DIR when set",
                          nullptr, ready));
  g_object_class_install_property(
      gobject_class, PROP_PROMPT,
      g_param_spec_string("prompt", "Prompt",
                          "Text prompt, for models with a text encoder (text_encoder/ + tokenizer/). "
                          "Ignored when prompt-embeds is set",
                          DEFAULT_PROMPT, ready));
  g_object_class_install_property(
      gobject_class, PROP_PROMPT_EMBEDS,
      g_param_spec_string("prompt-embeds", "Prompt embeddings",
                          "Safetensors file of precomputed prompt embeddings (`embeds` [L, text_dim], "
                          "optional `tags`); takes the place of the prompt",
                          nullptr, ready));
  g_object_class_install_property(
      gobject_class, PROP_SEED,
      g_param_spec_uint64("seed", "Seed",
                          "Seed of the initial noise: the same request and seed give the same frames", 0,
                          G_MAXUINT64, DEFAULT_SEED, ready));
  g_object_class_install_property(
      gobject_class, PROP_STEPS,
      g_param_spec_int("steps", "Steps",
                       "Denoising grid points N (N-1 model evaluations), at least 2; -1: the model's default",
                       -1, MAX_STEPS, DEFAULT_STEPS, ready));
  g_object_class_install_property(
      gobject_class, PROP_WIDTH,
      g_param_spec_int("width", "Width", "Frame width in pixels; -1: the model's default", -1, MAX_SIZE,
                       DEFAULT_SIZE, ready));
  g_object_class_install_property(
      gobject_class, PROP_HEIGHT,
      g_param_spec_int("height", "Height", "Frame height in pixels; -1: the model's default", -1, MAX_SIZE,
                       DEFAULT_SIZE, ready));
  g_object_class_install_property(
      gobject_class, PROP_NUM_FRAMES,
      g_param_spec_int("num-frames", "Number of frames",
                       "Frames in the clip (exactly); -1: the model's default. The stream ends after them",
                       -1, MAX_FRAMES, DEFAULT_NUM_FRAMES, ready));
  g_object_class_install_property(
      gobject_class, PROP_FRAMERATE,
      gst_param_spec_fraction(
          "framerate", "Frame rate",
          "Frame rate stamped on the frames; 0/1: the model's rate (24/1 for the H3 release)", 0, 1, 1000, 1,
          0, 1, ready));
  g_object_class_install_property(
      gobject_class, PROP_RANKS,
      g_param_spec_int("ranks", "Ranks",
                       "Engine ranks, run as threads in this process (one device each when device=cuda)", 1,
                       MAX_RANKS, DEFAULT_RANKS, ready));
  g_object_class_install_property(
      gobject_class, PROP_TP_SIZE,
      g_param_spec_int("tp-size", "Tensor-parallel size",
                       "Ranks that split each transformer layer (tensor parallelism); 0: all ranks", 0,
                       MAX_RANKS, DEFAULT_TP_SIZE, ready));
  g_object_class_install_property(
      gobject_class, PROP_DEVICE,
      g_param_spec_string(
          "device", "Device",
          "Where the ranks compute: \"cpu\", or \"cuda\" (needs a CUDA LibTorch and one GPU per rank)",
          DEFAULT_DEVICE, ready));
  g_object_class_install_property(
      gobject_class, PROP_QUEUE_CHUNKS,
      g_param_spec_int("queue-chunks", "Queued chunks",
                       "Decoded chunks that may wait for downstream before the engine is held back "
                       "(bounds the frames in flight)",
                       1, 64, DEFAULT_QUEUE_CHUNKS, ready));
  g_object_class_install_property(
      gobject_class, PROP_IS_LIVE,
      g_param_spec_boolean("is-live", "Is live",
                           "Act as a live source: produce in PLAYING only and sync to the clock (for RTP "
                           "streaming); the latency reported is the measured chunk time",
                           DEFAULT_IS_LIVE, ready));
  g_object_class_install_property(
      gobject_class, PROP_TIMEOUT,
      g_param_spec_uint("timeout", "Collective timeout",
                        "Seconds a rank may wait for a peer that shows no sign of life before the request "
                        "fails (waiting for a stalled downstream is not limited)",
                        1, 3600, DEFAULT_TIMEOUT, ready));

  gst_element_class_set_static_metadata(
      element_class, "H3 video generator", "Source/Video",
      "Generates video from a text prompt with the MiniMax-H3 diffusion model, "
      "pushing each decoded chunk as it is produced",
      "gst-h3 developers");
  gst_element_class_add_static_pad_template(element_class, &src_template);

  gst_tag_register(GST_H3_TAG_SEED, GST_TAG_FLAG_META, G_TYPE_UINT64, "h3 seed",
                   "seed of the H3 generation that made the stream", nullptr);

  element_class->change_state = GST_DEBUG_FUNCPTR(gst_h3_video_src_change_state);
  element_class->send_event = GST_DEBUG_FUNCPTR(gst_h3_video_src_send_event);

  basesrc_class->get_caps = GST_DEBUG_FUNCPTR(gst_h3_video_src_get_caps);
  basesrc_class->fixate = GST_DEBUG_FUNCPTR(gst_h3_video_src_fixate);
  basesrc_class->set_caps = GST_DEBUG_FUNCPTR(gst_h3_video_src_set_caps);
  basesrc_class->decide_allocation = GST_DEBUG_FUNCPTR(gst_h3_video_src_decide_allocation);
  basesrc_class->start = GST_DEBUG_FUNCPTR(gst_h3_video_src_start);
  basesrc_class->stop = GST_DEBUG_FUNCPTR(gst_h3_video_src_stop);
  basesrc_class->unlock = GST_DEBUG_FUNCPTR(gst_h3_video_src_unlock);
  basesrc_class->unlock_stop = GST_DEBUG_FUNCPTR(gst_h3_video_src_unlock_stop);
  basesrc_class->is_seekable = GST_DEBUG_FUNCPTR(gst_h3_video_src_is_seekable);
  basesrc_class->query = GST_DEBUG_FUNCPTR(gst_h3_video_src_query);
  basesrc_class->event = GST_DEBUG_FUNCPTR(gst_h3_video_src_event);
  basesrc_class->get_times = GST_DEBUG_FUNCPTR(gst_h3_video_src_get_times);
  pushsrc_class->create = GST_DEBUG_FUNCPTR(gst_h3_video_src_create);
}

static void gst_h3_video_src_init(GstH3VideoSrc* self) {
  self->priv = new H3VideoSrcPrivate();
  gst_video_info_init(&self->priv->info);
  gst_video_info_init(&self->priv->src_info);
  gst_base_src_set_format(GST_BASE_SRC(self), GST_FORMAT_TIME);
  gst_base_src_set_live(GST_BASE_SRC(self), DEFAULT_IS_LIVE);
  // The engine opens in start(), on a thread of its own: READY -> PAUSED returns at once.
  gst_base_src_set_async(GST_BASE_SRC(self), TRUE);
}

static void gst_h3_video_src_finalize(GObject* object) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(object);
  H3VideoSrcPrivate* p = self->priv;
  if (p->worker.joinable()) p->worker.join();  // stop() joined it already; never leave a thread behind
  if (p->converter) gst_video_converter_free(p->converter);
  delete p;
  self->priv = nullptr;
  G_OBJECT_CLASS(parent_class)->finalize(object);
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

static std::string string_or_empty(const GValue* value) {
  const gchar* s = g_value_get_string(value);
  return s ? s : "";
}

static void gst_h3_video_src_set_property(GObject* object, guint prop_id, const GValue* value,
                                          GParamSpec* pspec) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(object);
  H3VideoSrcPrivate* p = self->priv;

  GST_OBJECT_LOCK(self);
  const bool running = GST_STATE(self) > GST_STATE_READY;
  GST_OBJECT_UNLOCK(self);
  std::unique_lock<std::mutex> lock(p->prop_lock);
  if (running || p->started) {
    lock.unlock();
    // Every property shapes the request or the engine, which are fixed once started.
    GST_ELEMENT_WARNING(
        self, CORE, STATE_CHANGE,
        ("Property '%s' can only be changed in the NULL or READY state; the change is ignored", pspec->name),
        ("set while the element is PAUSED or PLAYING"));
    return;
  }
  h3src::Settings& s = p->props;
  switch (prop_id) {
    case PROP_MODEL: s.model = string_or_empty(value); break;
    case PROP_PROMPT: s.prompt = string_or_empty(value); break;
    case PROP_PROMPT_EMBEDS: s.embeds = string_or_empty(value); break;
    case PROP_SEED: s.seed = g_value_get_uint64(value); break;
    case PROP_STEPS: s.steps = g_value_get_int(value); break;
    case PROP_WIDTH: s.width = g_value_get_int(value); break;
    case PROP_HEIGHT: s.height = g_value_get_int(value); break;
    case PROP_NUM_FRAMES: s.num_frames = g_value_get_int(value); break;
    case PROP_FRAMERATE:
      s.fps_n = gst_value_get_fraction_numerator(value);
      s.fps_d = gst_value_get_fraction_denominator(value);
      break;
    case PROP_RANKS: s.ranks = g_value_get_int(value); break;
    case PROP_TP_SIZE: s.tp = g_value_get_int(value); break;
    case PROP_DEVICE: s.device = string_or_empty(value); break;
    case PROP_QUEUE_CHUNKS: s.queue_chunks = g_value_get_int(value); break;
    case PROP_IS_LIVE:
      s.live = g_value_get_boolean(value);
      // GstBaseSrc decides NO_PREROLL before start() runs: tell it now.
      gst_base_src_set_live(GST_BASE_SRC(self), s.live);
      break;
    case PROP_TIMEOUT: s.timeout_s = g_value_get_uint(value); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
  }
}

static void set_string_or_null(GValue* value, const std::string& s) {
  g_value_set_string(value, s.empty() ? nullptr : s.c_str());
}

static void gst_h3_video_src_get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(object);
  std::lock_guard<std::mutex> lock(self->priv->prop_lock);
  const h3src::Settings& s = self->priv->props;
  switch (prop_id) {
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
    case PROP_DEVICE: g_value_set_string(value, s.device.c_str()); break;
    case PROP_QUEUE_CHUNKS: g_value_set_int(value, s.queue_chunks); break;
    case PROP_IS_LIVE: g_value_set_boolean(value, s.live); break;
    case PROP_TIMEOUT: g_value_set_uint(value, s.timeout_s); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
  }
}

// ---------------------------------------------------------------------------
// GstBaseSrc
// ---------------------------------------------------------------------------

static std::string plugin_dir_of(GstH3VideoSrc* self) {
  std::string dir;
  GstElementFactory* factory = gst_element_get_factory(GST_ELEMENT(self));
  GstPlugin* plugin = factory ? gst_plugin_feature_get_plugin(GST_PLUGIN_FEATURE(factory)) : nullptr;
  if (plugin) {
    if (const gchar* file = gst_plugin_get_filename(plugin)) {
      gchar* d = g_path_get_dirname(file);
      dir = d;
      g_free(d);
    }
    gst_object_unref(plugin);
  }
  return dir;
}

static gboolean gst_h3_video_src_start(GstBaseSrc* bsrc) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  H3VideoSrcPrivate* p = self->priv;
  {
    std::lock_guard<std::mutex> lock(p->prop_lock);
    p->active = p->props;
  }
  const h3src::Settings& s = p->active;

  // The engine reads 0 as "the model's default"; the element spells that -1, so
  // an explicit 0 is a mistake to report, not a default to apply.
  const char* zero = s.width == 0        ? "width"
                     : s.height == 0     ? "height"
                     : s.num_frames == 0 ? "num-frames"
                     : s.steps == 0      ? "steps"
                                         : nullptr;
  if (zero) {
    GST_ELEMENT_ERROR(
        self, RESOURCE, SETTINGS,
        ("Property %s=0 is not a valid request: set a positive value, or -1 for the model's default", zero),
        (nullptr));
    return FALSE;
  }
  if (s.embeds.empty() && s.prompt.empty()) {
    GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS,
                      ("No prompt: set prompt, or prompt-embeds to an embeddings file"), (nullptr));
    return FALSE;
  }
  if (!s.embeds.empty() && !g_file_test(s.embeds.c_str(), G_FILE_TEST_IS_REGULAR)) {
    GST_ELEMENT_ERROR(
        self, RESOURCE, NOT_FOUND,
        ("prompt-embeds file '%s' does not exist: point prompt-embeds at an embeddings .safetensors "
         "file, or unset it to use the prompt",
         s.embeds.c_str()),
        (nullptr));
    return FALSE;
  }

  {
    std::lock_guard<std::mutex> lock(p->prop_lock);
    p->started = true;  // from here until stop(), property changes are refused
  }
  p->plugin_dir = plugin_dir_of(self);
  p->queue.reset();
  p->queue.set_max_chunks(static_cast<size_t>(s.queue_chunks));
  p->restart_pending = false;
  p->frame_n = 0;
  p->have_pending = false;
  p->pending = h3gst::Frame();
  p->tags_sent = false;
  p->first_running = GST_CLOCK_TIME_NONE;
  p->warned_late = false;
  GST_OBJECT_LOCK(self);
  p->have_plan = false;
  p->chunk_time = GST_CLOCK_TIME_NONE;
  p->reported_latency = GST_CLOCK_TIME_NONE;
  GST_OBJECT_UNLOCK(self);

  // A live source's task starts at PAUSED -> PLAYING, possibly before the async
  // start is complete: it must not negotiate before the plan fixes size and rate.
  // Clear the pad's initial reconfigure flag; gst_base_src_start_complete() sets
  // it again once the plan is known (and create() waits for that, below).
  gst_pad_check_reconfigure(GST_BASE_SRC_PAD(bsrc));
  h3src::post_progress(self, GST_PROGRESS_TYPE_START, "opening the H3 engine");
  h3src::start_worker(self);
  return TRUE;
}

// Stops the worker and forgets the request. Idempotent: GstBaseSrc calls stop()
// only for a start that completed, so a failed async start is cleaned up here
// from PAUSED -> READY too.
static void stop_running(GstH3VideoSrc* self) {
  H3VideoSrcPrivate* p = self->priv;
  h3src::cancel_and_join(self);
  p->queue.reset();
  p->have_pending = false;
  p->pending = h3gst::Frame();
  if (p->converter) {
    gst_video_converter_free(p->converter);
    p->converter = nullptr;
  }
  GST_OBJECT_LOCK(self);
  p->have_plan = false;
  GST_OBJECT_UNLOCK(self);
  std::lock_guard<std::mutex> lock(p->prop_lock);
  p->started = false;
}

static gboolean gst_h3_video_src_stop(GstBaseSrc* bsrc) {
  stop_running(GST_H3_VIDEO_SRC(bsrc));
  return TRUE;
}

static GstStateChangeReturn gst_h3_video_src_change_state(GstElement* element, GstStateChange transition) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(element);
  GstStateChangeReturn ret = GST_ELEMENT_CLASS(parent_class)->change_state(element, transition);
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY) stop_running(self);
  if (transition == GST_STATE_CHANGE_READY_TO_NULL) {
    // The engine was kept for a restart from READY; NULL releases it (joins its rank threads).
    self->priv->engine.reset();
  }
  return ret;
}

static gboolean gst_h3_video_src_unlock(GstBaseSrc* bsrc) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  GST_LOG_OBJECT(self, "unlock");
  self->priv->queue.set_flushing(true);
  return TRUE;
}

static gboolean gst_h3_video_src_unlock_stop(GstBaseSrc* bsrc) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  GST_LOG_OBJECT(self, "unlock stop");
  self->priv->queue.set_flushing(false);
  return TRUE;
}

// Chunk k is computed from chunk k-1's state, so the clip cannot be entered in
// the middle: seeks are refused.
static gboolean gst_h3_video_src_is_seekable(GstBaseSrc*) {
  return FALSE;
}

static gboolean gst_h3_video_src_send_event(GstElement* element, GstEvent* event) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(element);
  switch (GST_EVENT_TYPE(event)) {
    case GST_EVENT_SEEK:
      GST_DEBUG_OBJECT(self, "refusing a seek: a generated clip is not seekable");
      gst_event_unref(event);
      return FALSE;
    case GST_EVENT_FLUSH_START: h3src::handle_flush_start(self); break;
    default: break;
  }
  return GST_ELEMENT_CLASS(parent_class)->send_event(element, event);
}

static gboolean gst_h3_video_src_event(GstBaseSrc* bsrc, GstEvent* event) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  switch (GST_EVENT_TYPE(event)) {
    case GST_EVENT_SEEK:
      GST_DEBUG_OBJECT(self, "refusing a seek: a generated clip is not seekable");
      return FALSE;
    case GST_EVENT_FLUSH_START: h3src::handle_flush_start(self); break;
    default: break;
  }
  return GST_BASE_SRC_CLASS(parent_class)->event(bsrc, event);
}

// Before the plan is known, the template; then exactly the planned size and rate.
static GstCaps* gst_h3_video_src_get_caps(GstBaseSrc* bsrc, GstCaps* filter) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  H3VideoSrcPrivate* p = self->priv;
  GstCaps* caps = gst_pad_get_pad_template_caps(GST_BASE_SRC_PAD(bsrc));
  GST_OBJECT_LOCK(self);
  if (p->have_plan) {
    caps = gst_caps_make_writable(caps);
    gst_caps_set_simple(caps, "width", G_TYPE_INT, static_cast<gint>(p->plan.width), "height", G_TYPE_INT,
                        static_cast<gint>(p->plan.height), "framerate", GST_TYPE_FRACTION, p->fps_n, p->fps_d,
                        "pixel-aspect-ratio", GST_TYPE_FRACTION, 1, 1, nullptr);
  }
  GST_OBJECT_UNLOCK(self);
  if (filter) {
    GstCaps* tmp = gst_caps_intersect_full(filter, caps, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref(caps);
    caps = tmp;
  }
  return caps;
}

static GstCaps* gst_h3_video_src_fixate(GstBaseSrc* bsrc, GstCaps* caps) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  H3VideoSrcPrivate* p = self->priv;
  caps = gst_caps_truncate(gst_caps_make_writable(caps));
  GstStructure* s = gst_caps_get_structure(caps, 0);
  GST_OBJECT_LOCK(self);
  const gint w = static_cast<gint>(p->plan.width), h = static_cast<gint>(p->plan.height);
  const gint fn = p->fps_n, fd = p->fps_d;
  GST_OBJECT_UNLOCK(self);
  gst_structure_fixate_field_nearest_int(s, "width", w);
  gst_structure_fixate_field_nearest_int(s, "height", h);
  gst_structure_fixate_field_nearest_fraction(s, "framerate", fn, fd);
  if (gst_structure_has_field(s, "pixel-aspect-ratio"))
    gst_structure_fixate_field_nearest_fraction(s, "pixel-aspect-ratio", 1, 1);
  else
    gst_structure_set(s, "pixel-aspect-ratio", GST_TYPE_FRACTION, 1, 1, nullptr);
  if (gst_structure_has_field(s, "interlace-mode"))
    gst_structure_fixate_field_string(s, "interlace-mode", "progressive");
  else
    gst_structure_set(s, "interlace-mode", G_TYPE_STRING, "progressive", nullptr);
  gst_structure_fixate_field_string(s, "format", "RGB");
  // The engine's pixels are sRGB; YUV output is converted with BT.709.
  const gchar* fmt = gst_structure_get_string(s, "format");
  const bool yuv = fmt && g_str_equal(fmt, "I420");
  if (!gst_structure_has_field(s, "colorimetry"))
    gst_structure_set(s, "colorimetry", G_TYPE_STRING, yuv ? "bt709" : "sRGB", nullptr);
  else
    gst_structure_fixate_field_string(s, "colorimetry", yuv ? "bt709" : "sRGB");
  if (yuv && !gst_structure_has_field(s, "chroma-site"))
    gst_structure_set(s, "chroma-site", G_TYPE_STRING, "mpeg2", nullptr);
  return GST_BASE_SRC_CLASS(parent_class)->fixate(bsrc, caps);
}

static gboolean gst_h3_video_src_set_caps(GstBaseSrc* bsrc, GstCaps* caps) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  H3VideoSrcPrivate* p = self->priv;
  GstVideoInfo info;
  if (!gst_video_info_from_caps(&info, caps)) {
    GST_ERROR_OBJECT(self, "cannot parse caps %" GST_PTR_FORMAT, static_cast<void*>(caps));
    return FALSE;
  }
  GST_OBJECT_LOCK(self);
  const bool have_plan = p->have_plan;
  const h3gst::ClipInfo plan = p->plan;
  const gint fn = p->fps_n, fd = p->fps_d;
  GST_OBJECT_UNLOCK(self);
  if (!have_plan || GST_VIDEO_INFO_WIDTH(&info) != plan.width ||
      GST_VIDEO_INFO_HEIGHT(&info) != plan.height || GST_VIDEO_INFO_FPS_N(&info) != fn ||
      GST_VIDEO_INFO_FPS_D(&info) != fd || GST_VIDEO_INFO_PAR_N(&info) != 1 ||
      GST_VIDEO_INFO_PAR_D(&info) != 1 || GST_VIDEO_INFO_IS_INTERLACED(&info)) {
    GST_WARNING_OBJECT(self,
                       "caps %" GST_PTR_FORMAT " do not match the planned clip (%" G_GINT64_FORMAT
                       "x%" G_GINT64_FORMAT " at %d/%d, square pixels, progressive)",
                       static_cast<void*>(caps), plan.width, plan.height, fn, fd);
    return FALSE;
  }
  // The engine delivers packed RGB rows of width*3 bytes.
  GstVideoInfo src;
  gst_video_info_set_format(&src, GST_VIDEO_FORMAT_RGB, GST_VIDEO_INFO_WIDTH(&info),
                            GST_VIDEO_INFO_HEIGHT(&info));
  GST_VIDEO_INFO_PLANE_STRIDE(&src, 0) = GST_VIDEO_INFO_WIDTH(&info) * 3;
  GST_VIDEO_INFO_SIZE(&src) =
      static_cast<gsize>(GST_VIDEO_INFO_WIDTH(&info)) * 3 * GST_VIDEO_INFO_HEIGHT(&info);
  GST_VIDEO_INFO_FPS_N(&src) = fn;
  GST_VIDEO_INFO_FPS_D(&src) = fd;
  if (p->converter) {
    gst_video_converter_free(p->converter);
    p->converter = nullptr;
  }
  if (GST_VIDEO_INFO_FORMAT(&info) != GST_VIDEO_FORMAT_RGB) {
    p->converter = gst_video_converter_new(
        &src, &info,
        gst_structure_new("GstVideoConverter", GST_VIDEO_CONVERTER_OPT_DITHER_METHOD,
                          GST_TYPE_VIDEO_DITHER_METHOD, GST_VIDEO_DITHER_NONE, nullptr));
    if (!p->converter) {
      GST_ERROR_OBJECT(self, "no conversion from RGB to %s", GST_VIDEO_INFO_NAME(&info));
      return FALSE;
    }
  }
  p->src_info = src;
  p->info = info;
  GST_DEBUG_OBJECT(self, "negotiated %" GST_PTR_FORMAT, static_cast<void*>(caps));
  return TRUE;
}

static gboolean gst_h3_video_src_decide_allocation(GstBaseSrc* bsrc, GstQuery* query) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  GstCaps* caps = nullptr;
  gst_query_parse_allocation(query, &caps, nullptr);
  GstVideoInfo info;
  if (!caps || !gst_video_info_from_caps(&info, caps)) return FALSE;

  GstBufferPool* pool = nullptr;
  guint size = 0, min = 0, max = 0;
  const bool update = gst_query_get_n_allocation_pools(query) > 0;
  if (update) gst_query_parse_nth_allocation_pool(query, 0, &pool, &size, &min, &max);
  size = MAX(size, static_cast<guint>(GST_VIDEO_INFO_SIZE(&info)));
  if (!pool) pool = gst_video_buffer_pool_new();

  GstStructure* config = gst_buffer_pool_get_config(pool);
  gst_buffer_pool_config_set_params(config, caps, size, min, max);
  if (gst_query_find_allocation_meta(query, GST_VIDEO_META_API_TYPE, nullptr))
    gst_buffer_pool_config_add_option(config, GST_BUFFER_POOL_OPTION_VIDEO_META);
  if (!gst_buffer_pool_set_config(pool, config)) {
    config = gst_buffer_pool_get_config(pool);
    if (!gst_buffer_pool_config_validate_params(config, caps, size, min, max)) {
      gst_structure_free(config);
      gst_object_unref(pool);
      GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS,
                        ("Downstream's buffer pool cannot hold %s frames", GST_VIDEO_INFO_NAME(&info)),
                        (nullptr));
      return FALSE;
    }
    gst_buffer_pool_set_config(pool, config);
  }
  if (update)
    gst_query_set_nth_allocation_pool(query, 0, pool, size, min, max);
  else
    gst_query_add_allocation_pool(query, pool, size, min, max);
  gst_object_unref(pool);
  return GST_BASE_SRC_CLASS(parent_class)->decide_allocation(bsrc, query);
}

// Frames the stream will carry: the plan's, or fewer when num-buffers says so.
static int64_t stream_frames(GstH3VideoSrc* self) {
  H3VideoSrcPrivate* p = self->priv;
  int64_t n = -1;
  GST_OBJECT_LOCK(self);
  if (p->have_plan) n = p->plan.num_frames;
  GST_OBJECT_UNLOCK(self);
  if (n < 0) {
    std::lock_guard<std::mutex> lock(p->prop_lock);
    if (p->props.num_frames > 0) n = p->props.num_frames;
  }
  const gint nb = GST_BASE_SRC(self)->num_buffers;
  if (nb >= 0 && (n < 0 || nb < n)) n = nb;
  return n;
}

static void current_rate(GstH3VideoSrc* self, gint* n, gint* d) {
  H3VideoSrcPrivate* p = self->priv;
  GST_OBJECT_LOCK(self);
  *n = p->fps_n;
  *d = p->fps_d;
  const bool have_plan = p->have_plan;
  GST_OBJECT_UNLOCK(self);
  if (!have_plan) {
    std::lock_guard<std::mutex> lock(p->prop_lock);
    if (p->props.fps_n > 0) {
      *n = p->props.fps_n;
      *d = p->props.fps_d;
    }
  }
}

static GstClockTime frame_time(int64_t n, gint fps_n, gint fps_d) {
  return gst_util_uint64_scale(static_cast<guint64>(n), static_cast<guint64>(fps_d) * GST_SECOND,
                               static_cast<guint64>(fps_n));
}

// What the element needs as live latency: one frame, or the slowest chunk's
// decode time seen so far plus 5 %, whichever is more.
static GstClockTime live_latency(GstH3VideoSrc* self) {
  H3VideoSrcPrivate* p = self->priv;
  gint fn, fd;
  current_rate(self, &fn, &fd);
  GstClockTime est = fn > 0 ? frame_time(1, fn, fd) : 0;
  GST_OBJECT_LOCK(self);
  if (GST_CLOCK_TIME_IS_VALID(p->chunk_time)) est = MAX(est, p->chunk_time + p->chunk_time / 20);
  GST_OBJECT_UNLOCK(self);
  return est;
}

static gboolean gst_h3_video_src_query(GstBaseSrc* bsrc, GstQuery* query) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  H3VideoSrcPrivate* p = self->priv;
  switch (GST_QUERY_TYPE(query)) {
    case GST_QUERY_DURATION: {
      GstFormat format;
      gst_query_parse_duration(query, &format, nullptr);
      const int64_t n = stream_frames(self);
      if (n < 0) break;
      gint fn, fd;
      current_rate(self, &fn, &fd);
      if (format == GST_FORMAT_TIME && fn > 0) {
        gst_query_set_duration(query, GST_FORMAT_TIME, frame_time(n, fn, fd));
        return TRUE;
      }
      if (format == GST_FORMAT_DEFAULT) {
        gst_query_set_duration(query, GST_FORMAT_DEFAULT, n);
        return TRUE;
      }
      break;
    }
    case GST_QUERY_CONVERT: {
      GstFormat src_fmt, dest_fmt;
      gint64 src_val, dest_val;
      gst_query_parse_convert(query, &src_fmt, &src_val, &dest_fmt, &dest_val);
      if (GST_VIDEO_INFO_FORMAT(&p->info) == GST_VIDEO_FORMAT_UNKNOWN) break;
      if (!gst_video_info_convert(&p->info, src_fmt, src_val, dest_fmt, &dest_val)) return FALSE;
      gst_query_set_convert(query, src_fmt, src_val, dest_fmt, dest_val);
      return TRUE;
    }
    case GST_QUERY_LATENCY: {
      if (!gst_base_src_is_live(bsrc)) break;
      // A chunk's frames exist only once the whole chunk is decoded: report the
      // slowest chunk seen (plus 5 %), at least one frame, at least what the
      // base class measured at start-up.
      if (!GST_BASE_SRC_CLASS(parent_class)->query(bsrc, query)) return FALSE;
      gboolean live;
      GstClockTime min, max;
      gst_query_parse_latency(query, &live, &min, &max);
      min = MAX(min, live_latency(self));
      // The queue can hold queue-chunks more chunks: that much more waiting is fine.
      if (GST_CLOCK_TIME_IS_VALID(max)) max = MAX(max, min);
      gst_query_set_latency(query, TRUE, min, max);
      GST_DEBUG_OBJECT(self, "latency: min %" GST_TIME_FORMAT, GST_TIME_ARGS(min));
      return TRUE;
    }
    default: break;
  }
  return GST_BASE_SRC_CLASS(parent_class)->query(bsrc, query);
}

// Live only: lets the base class wait for each frame's time on the clock.
static void gst_h3_video_src_get_times(GstBaseSrc* bsrc, GstBuffer* buffer, GstClockTime* start,
                                       GstClockTime* end) {
  *start = *end = GST_CLOCK_TIME_NONE;
  if (!gst_base_src_is_live(bsrc)) return;
  const GstClockTime ts = GST_BUFFER_PTS(buffer);
  if (!GST_CLOCK_TIME_IS_VALID(ts)) return;
  *start = ts;
  if (GST_BUFFER_DURATION_IS_VALID(buffer)) *end = ts + GST_BUFFER_DURATION(buffer);
}

// ---------------------------------------------------------------------------
// Streaming
// ---------------------------------------------------------------------------

static void send_tags(GstH3VideoSrc* self) {
  const h3src::Settings& s = self->priv->active;
  GstTagList* tags = gst_tag_list_new_empty();
  std::string title = s.prompt;
  if (!s.embeds.empty()) {
    gchar* base = g_path_get_basename(s.embeds.c_str());
    title = std::string("prompt embeddings ") + base;
    g_free(base);
  }
  gst_tag_list_add(tags, GST_TAG_MERGE_REPLACE, GST_TAG_TITLE, title.c_str(), GST_TAG_COMMENT, title.c_str(),
                   GST_TAG_ENCODER, "gst-h3", GST_H3_TAG_SEED, static_cast<guint64>(s.seed), nullptr);
  gst_tag_list_set_scope(tags, GST_TAG_SCOPE_GLOBAL);
  // The base class queues TAG events and pushes them, in order, before the
  // next buffer. Called without the state lock that gst_element_send_event takes,
  // which a state change may be holding while it waits for this thread.
  GST_ELEMENT_CLASS(parent_class)->send_event(GST_ELEMENT(self), gst_event_new_tag(tags));
}

static void send_chunk_event(GstH3VideoSrc* self, const h3gst::Frame& f, int64_t total_frames) {
  GstStructure* s = gst_structure_new("h3-chunk", "first-frame", G_TYPE_INT64, f.index, "total-frames",
                                      G_TYPE_INT64, total_frames, nullptr);
  GST_ELEMENT_CLASS(parent_class)
      ->send_event(GST_ELEMENT(self), gst_event_new_custom(GST_EVENT_CUSTOM_DOWNSTREAM, s));
}

static bool write_frame(H3VideoSrcPrivate* p, const h3gst::Frame& f, GstBuffer* buf) {
  GstVideoFrame out;
  if (!gst_video_frame_map(&out, &p->info, buf, GST_MAP_WRITE)) return false;
  const gsize row = static_cast<gsize>(f.width) * 3;
  if (!p->converter) {
    auto* dst = static_cast<guint8*>(GST_VIDEO_FRAME_PLANE_DATA(&out, 0));
    const gint stride = GST_VIDEO_FRAME_PLANE_STRIDE(&out, 0);
    for (int64_t y = 0; y < f.height; ++y) memcpy(dst + y * stride, f.data + y * row, row);
  } else {
    const gsize size = row * static_cast<gsize>(f.height);
    GstBuffer* in_buf = gst_buffer_new_wrapped_full(GST_MEMORY_FLAG_READONLY, const_cast<uint8_t*>(f.data),
                                                    size, 0, size, nullptr, nullptr);
    GstVideoFrame in;
    const bool mapped = gst_video_frame_map(&in, &p->src_info, in_buf, GST_MAP_READ);
    if (mapped) {
      gst_video_converter_frame(p->converter, &in, &out);
      gst_video_frame_unmap(&in);
    }
    gst_buffer_unref(in_buf);
    if (!mapped) {
      gst_video_frame_unmap(&out);
      return false;
    }
  }
  gst_video_frame_unmap(&out);
  return true;
}

// Live only, at each chunk's first frame: a chunk that comes after its frames
// were due (generation slower than real time) is reported with a QoS message,
// and once per stream with a warning. Frames are sent late, never dropped.
static void check_lateness(GstH3VideoSrc* self, int64_t n, GstClockTime pts, GstClockTime duration) {
  H3VideoSrcPrivate* p = self->priv;
  GstClock* clock = gst_element_get_clock(GST_ELEMENT(self));
  if (!clock) return;
  const GstClockTime now = gst_clock_get_time(clock) - gst_element_get_base_time(GST_ELEMENT(self));
  gst_object_unref(clock);
  if (!GST_CLOCK_TIME_IS_VALID(p->first_running)) {
    p->first_running = now - pts;
    return;
  }
  const GstClockTime due = p->first_running + pts + live_latency(self);
  if (now <= due) return;
  const GstClockTime late = now - due;
  GstMessage* m = gst_message_new_qos(GST_OBJECT(self), TRUE, now, pts, pts, duration);
  gst_message_set_qos_values(m, static_cast<gint64>(late), 1.0, 1000000);
  gst_message_set_qos_stats(m, GST_FORMAT_BUFFERS, static_cast<guint64>(n), 0);
  gst_element_post_message(GST_ELEMENT(self), m);
  if (!p->warned_late) {
    p->warned_late = true;
    GST_ELEMENT_WARNING_WITH_DETAILS(
        self, STREAM, FAILED,
        ("Generation is slower than real time: frame %" G_GINT64_FORMAT " came %" G_GUINT64_FORMAT
         " ms after it was due. Frames are sent late, none is dropped; lower num-frames, width/height or "
         "steps, add ranks, or use is-live=false",
         n, static_cast<guint64>(late / GST_MSECOND)),
        (nullptr),
        ("frame", G_TYPE_INT64, n, "lateness", G_TYPE_UINT64, static_cast<guint64>(late), nullptr));
  }
}

static GstFlowReturn gst_h3_video_src_create(GstPushSrc* psrc, GstBuffer** outbuf) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(psrc);
  GstBaseSrc* bsrc = GST_BASE_SRC(psrc);
  H3VideoSrcPrivate* p = self->priv;

  if (p->restart_pending) h3src::restart_generation(self);

  GST_OBJECT_LOCK(self);
  const bool have_plan = p->have_plan;
  const h3gst::ClipInfo plan = p->plan;
  const gint fn = p->fps_n, fd = p->fps_d;
  GST_OBJECT_UNLOCK(self);
  // Live, the task may run before the async start completes. It may not block
  // here (gst_base_src_start_complete() needs the stream lock it holds): pause it;
  // the start's completion restarts it. The plan is published under the stream
  // lock together with that completion (h3videosrc_run.cpp: complete_start).
  if (!have_plan) return GST_FLOW_FLUSHING;

  if (p->frame_n >= plan.num_frames) return GST_FLOW_EOS;

  h3gst::Frame f;
  if (p->have_pending) {
    f = p->pending;
    p->have_pending = false;
    p->pending = h3gst::Frame();
  } else {
    int code = 0;
    std::string message;
    switch (p->queue.pop(&f, &code, &message)) {
      case h3gst::FrameQueue::PopResult::kFrame: break;
      case h3gst::FrameQueue::PopResult::kFlushing: return GST_FLOW_FLUSHING;
      case h3gst::FrameQueue::PopResult::kEnd:
        GST_ELEMENT_ERROR(
            self, STREAM, FAILED,
            ("The engine ended the clip after %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT " frames",
             p->frame_n, plan.num_frames),
            (nullptr));
        return GST_FLOW_ERROR;
      case h3gst::FrameQueue::PopResult::kError: {
        h3gst::Failure failure{static_cast<h3gst::FailureKind>(code), message};
        h3src::post_failure(self, failure, "Generation failed");
        return GST_FLOW_ERROR;
      }
    }
  }
  if (f.index != p->frame_n || f.width != plan.width || f.height != plan.height) {
    GST_ELEMENT_ERROR(
        self, STREAM, FAILED, ("The engine delivered an unexpected frame"),
        ("frame %" G_GINT64_FORMAT " (%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "), expected %" G_GINT64_FORMAT,
         f.index, f.width, f.height, p->frame_n));
    return GST_FLOW_ERROR;
  }

  GstBuffer* buf = nullptr;
  const GstFlowReturn ret = GST_BASE_SRC_CLASS(parent_class)
                                ->alloc(bsrc, GST_BUFFER_OFFSET_NONE, GST_VIDEO_INFO_SIZE(&p->info), &buf);
  if (ret != GST_FLOW_OK) {
    // Interrupted (a flush or a pause): keep the frame for the next create().
    p->pending = f;
    p->have_pending = true;
    return ret;
  }
  if (!write_frame(p, f, buf)) {
    gst_buffer_unref(buf);
    GST_ELEMENT_ERROR(self, RESOURCE, FAILED, ("Could not write a frame into the output buffer"), (nullptr));
    return GST_FLOW_ERROR;
  }

  const int64_t n = p->frame_n;
  GST_BUFFER_PTS(buf) = frame_time(n, fn, fd);
  GST_BUFFER_DTS(buf) = GST_CLOCK_TIME_NONE;
  GST_BUFFER_DURATION(buf) = frame_time(n + 1, fn, fd) - GST_BUFFER_PTS(buf);
  GST_BUFFER_OFFSET(buf) = static_cast<guint64>(n);
  GST_BUFFER_OFFSET_END(buf) = static_cast<guint64>(n + 1);
  if (n == 0) GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_DISCONT);

  if (!p->tags_sent) {
    send_tags(self);
    p->tags_sent = true;
  }
  if (f.chunk_start) send_chunk_event(self, f, plan.num_frames);
  if (f.chunk_start && gst_base_src_is_live(bsrc))
    check_lateness(self, n, GST_BUFFER_PTS(buf), GST_BUFFER_DURATION(buf));

  ++p->frame_n;
  GST_LOG_OBJECT(self, "frame %" G_GINT64_FORMAT " pts %" GST_TIME_FORMAT, n,
                 GST_TIME_ARGS(GST_BUFFER_PTS(buf)));
  *outbuf = buf;
  return GST_FLOW_OK;
}
