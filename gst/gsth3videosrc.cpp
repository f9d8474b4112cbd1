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

#include <chrono>
#include <mutex>
#include <string>

#include "element_common.h"
#include "frame_writer.h"
#include "generation.h"
#include "h3videosrc_messages.h"
#include "h3videosrc_settings.h"

GST_DEBUG_CATEGORY(gst_h3_video_src_debug);
#define GST_CAT_DEFAULT gst_h3_video_src_debug

#define H3_FORMATS "{ RGB, RGBA, BGRx, I420 }"

static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE(
    "src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS(GST_VIDEO_CAPS_MAKE(H3_FORMATS)));

namespace {

// The generation's steps, on its worker thread, turned into bus messages and
// into the element's published plan and async-start completion.
class ElementObserver : public h3src::PostingObserver {
 public:
  explicit ElementObserver(GstH3VideoSrc* self) : PostingObserver(GST_ELEMENT(self)), self_(self) {}
  void complete_start(const h3::ClipPlan* plan) override;
  void chunk_decoded(std::chrono::nanoseconds time) override;

 private:
  GstH3VideoSrc* self_;
};

// What the streaming thread knows about the stream it is producing. One place
// resets it: reset_stream_state(), at start() and when a flush restarts the clip.
struct StreamState {
  int64_t frame_n = 0;  // the next frame's index in the clip
  bool tags_sent = false;
  // Live: the running time the first frame was taken at, and whether the
  // "slower than real time" warning went out already.
  GstClockTime first_running = GST_CLOCK_TIME_NONE;
  bool warned_late = false;
};

// What the worker publishes for the element's other threads: the plan and the
// rate once the async start completes, and the live latency measurements.
struct Published {
  bool have_plan = false;
  h3::ClipPlan plan{};
  gint fps_n = 24, fps_d = 1;  // the framerate property's rate, else the plan's
  int64_t num_frames = -1;     // the num-frames property's until the plan's is known; -1: unknown
  // Live latency: the slowest chunk's decode time seen so far, and what was last reported.
  GstClockTime chunk_time = GST_CLOCK_TIME_NONE;
  GstClockTime reported_latency = GST_CLOCK_TIME_NONE;
};

}  // namespace

// h3videosrc's instance state. Locks, always taken in this order (a lock is
// never taken while a later one in the list is held):
//   1. Generation's lock (generation.h): the worker's hand-over with stop() and
//      flushes; the worker completes the async start while holding it;
//   2. the src pad's stream lock (GST_PAD_STREAM_LOCK), around that completion;
//   3. GST_OBJECT_LOCK: `pub`.
// `prop_lock` guards `props` and `started` and is never held with another lock;
// the frame queue's own lock is innermost (taken under 1, never holding another).
struct H3VideoSrcPrivate {
  explicit H3VideoSrcPrivate(GstH3VideoSrc* self) : observer(self), generation(observer) {}

  std::mutex prop_lock;
  h3src::Settings props;  // property values, set from any thread
  bool started = false;   // from start() to stop(): property changes are refused

  // Copied from `props` in start(); read-only while started.
  h3src::Settings active;

  ElementObserver observer;
  h3src::Generation generation;  // worker thread, frame queue, engine handle

  Published pub;  // GST_OBJECT_LOCK

  // Streaming thread only (and start()/stop(), while it does not run).
  h3src::FrameWriter writer;  // the negotiated format and the conversion to it
  StreamState stream;
};

struct _GstH3VideoSrc {
  GstPushSrc parent;
  H3VideoSrcPrivate* priv;
};

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
static GstFlowReturn gst_h3_video_src_fill(GstPushSrc* psrc, GstBuffer* buf);

static void gst_h3_video_src_class_init(GstH3VideoSrcClass* klass) {
  GObjectClass* gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  GstBaseSrcClass* basesrc_class = GST_BASE_SRC_CLASS(klass);
  GstPushSrcClass* pushsrc_class = GST_PUSH_SRC_CLASS(klass);

  GST_DEBUG_CATEGORY_INIT(gst_h3_video_src_debug, "h3videosrc", 0, "H3 video generator source");

  gobject_class->finalize = gst_h3_video_src_finalize;
  gobject_class->set_property = gst_h3_video_src_set_property;
  gobject_class->get_property = gst_h3_video_src_get_property;
  h3src::install_properties(gobject_class);

  gst_element_class_set_static_metadata(
      element_class, "H3 video generator", "Source/Video",
      "Generates video from a text prompt with the MiniMax-H3 diffusion model, "
      "pushing each decoded chunk as it is produced",
      "gst-h3 developers");
  gst_element_class_add_static_pad_template(element_class, &src_template);

  h3src::register_tags();

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
  pushsrc_class->fill = GST_DEBUG_FUNCPTR(gst_h3_video_src_fill);
}

static void gst_h3_video_src_init(GstH3VideoSrc* self) {
  self->priv = new H3VideoSrcPrivate(self);
  gst_base_src_set_format(GST_BASE_SRC(self), GST_FORMAT_TIME);
  gst_base_src_set_live(GST_BASE_SRC(self), self->priv->props.live);
  // The engine opens in start(), on a thread of its own: READY -> PAUSED returns at once.
  gst_base_src_set_async(GST_BASE_SRC(self), TRUE);
}

static void gst_h3_video_src_finalize(GObject* object) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(object);
  delete self->priv;  // the generation joins its worker (stop() did already) and releases the engine
  self->priv = nullptr;
  G_OBJECT_CLASS(parent_class)->finalize(object);
}

// ---------------------------------------------------------------------------
// Properties (h3videosrc_settings.cpp)
// ---------------------------------------------------------------------------

static void gst_h3_video_src_set_property(GObject* object, guint prop_id, const GValue* value,
                                          GParamSpec* pspec) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(object);
  H3VideoSrcPrivate* p = self->priv;

  const std::unique_lock<std::mutex> lock =
      h3src::lock_for_change(GST_ELEMENT(self), pspec, p->prop_lock, p->started);
  if (!lock.owns_lock()) return;
  if (!h3src::set_property(&p->props, prop_id, value)) {
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
    return;
  }
  // GstBaseSrc decides NO_PREROLL before start() runs: tell it now.
  if (prop_id == h3src::PROP_IS_LIVE) gst_base_src_set_live(GST_BASE_SRC(self), p->props.live);
}

static void gst_h3_video_src_get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(object);
  std::lock_guard<std::mutex> lock(self->priv->prop_lock);
  if (!h3src::get_property(self->priv->props, prop_id, value))
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
}

// ---------------------------------------------------------------------------
// States: start, stop, unlock
// ---------------------------------------------------------------------------

static void reset_stream_state(H3VideoSrcPrivate* p) {
  p->stream = StreamState();
}

static gboolean gst_h3_video_src_start(GstBaseSrc* bsrc) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  H3VideoSrcPrivate* p = self->priv;
  {
    std::lock_guard<std::mutex> lock(p->prop_lock);
    p->active = p->props;
  }
  const h3src::Settings& s = p->active;
  if (!h3src::check_settings(GST_ELEMENT(self), s)) return FALSE;
  {
    std::lock_guard<std::mutex> lock(p->prop_lock);
    p->started = true;
  }
  reset_stream_state(p);
  GST_OBJECT_LOCK(self);
  p->pub = Published();
  if (s.fps_n > 0) {
    p->pub.fps_n = s.fps_n;
    p->pub.fps_d = s.fps_d;
  }
  if (s.num_frames > 0) p->pub.num_frames = s.num_frames;
  GST_OBJECT_UNLOCK(self);

  // A live source's task starts at PAUSED -> PLAYING, possibly before the async
  // start is complete: it must not negotiate before the plan fixes size and rate.
  // Clear the pad's initial reconfigure flag; gst_base_src_start_complete() sets
  // it again once the plan is known (and fill() waits for that).
  gst_pad_check_reconfigure(GST_BASE_SRC_PAD(bsrc));
  h3src::post_open_progress(GST_ELEMENT(self), GST_PROGRESS_TYPE_START, "opening the H3 engine");
  h3src::Generation::Request request;
  request.plugin_dir = h3src::plugin_dir_of(GST_ELEMENT(self));
  request.engine = h3src::to_engine_options(s);
  request.clip = h3src::to_request(s);
  request.queue_chunks = static_cast<size_t>(s.queue_chunks);
  p->generation.start(std::move(request));
  return TRUE;
}

// Stops the worker and forgets the request. Idempotent: GstBaseSrc calls stop()
// only for a start that completed, so a failed async start is cleaned up here
// from PAUSED -> READY too.
static void stop_running(GstH3VideoSrc* self) {
  H3VideoSrcPrivate* p = self->priv;
  p->generation.stop();
  p->writer.reset();
  GST_OBJECT_LOCK(self);
  p->pub.have_plan = false;
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
  // The engine was kept for a restart from READY; NULL releases it (joins its rank threads).
  if (transition == GST_STATE_CHANGE_READY_TO_NULL) self->priv->generation.close_engine();
  return ret;
}

static gboolean gst_h3_video_src_unlock(GstBaseSrc* bsrc) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  GST_LOG_OBJECT(self, "unlock");
  self->priv->generation.set_flushing(true);
  return TRUE;
}

static gboolean gst_h3_video_src_unlock_stop(GstBaseSrc* bsrc) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  GST_LOG_OBJECT(self, "unlock stop");
  self->priv->generation.set_flushing(false);
  return TRUE;
}

// ---------------------------------------------------------------------------
// Events, caps, allocation, queries
// ---------------------------------------------------------------------------

// Chunk k is computed from chunk k-1's state, so the clip cannot be entered in
// the middle: seeks are refused.
static gboolean gst_h3_video_src_is_seekable(GstBaseSrc*) {
  return FALSE;
}

// Events sent to the element and events arriving on its pad: false refuses it.
// A flush throws away what was generated: the running request is cancelled and
// the next fill() generates the clip again from the first frame.
static bool accept_event(GstH3VideoSrc* self, GstEvent* event) {
  switch (GST_EVENT_TYPE(event)) {
    case GST_EVENT_SEEK:
      GST_DEBUG_OBJECT(self, "refusing a seek: a generated clip is not seekable");
      return false;
    case GST_EVENT_FLUSH_START: self->priv->generation.cancel(); return true;
    default: return true;
  }
}

static gboolean gst_h3_video_src_send_event(GstElement* element, GstEvent* event) {
  if (!accept_event(GST_H3_VIDEO_SRC(element), event)) {
    gst_event_unref(event);
    return FALSE;
  }
  return GST_ELEMENT_CLASS(parent_class)->send_event(element, event);
}

static gboolean gst_h3_video_src_event(GstBaseSrc* bsrc, GstEvent* event) {
  if (!accept_event(GST_H3_VIDEO_SRC(bsrc), event)) return FALSE;
  return GST_BASE_SRC_CLASS(parent_class)->event(bsrc, event);
}

static Published published(GstH3VideoSrc* self) {
  GST_OBJECT_LOCK(self);
  const Published pub = self->priv->pub;
  GST_OBJECT_UNLOCK(self);
  return pub;
}

// Before the plan is known, the template; then exactly the planned size and rate.
static GstCaps* gst_h3_video_src_get_caps(GstBaseSrc* bsrc, GstCaps* filter) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  GstCaps* caps = gst_pad_get_pad_template_caps(GST_BASE_SRC_PAD(bsrc));
  const Published pub = published(self);
  if (pub.have_plan) caps = h3src::planned_video_caps(caps, pub.plan, pub.fps_n, pub.fps_d);
  if (filter) {
    GstCaps* tmp = gst_caps_intersect_full(filter, caps, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref(caps);
    caps = tmp;
  }
  return caps;
}

static GstCaps* gst_h3_video_src_fixate(GstBaseSrc* bsrc, GstCaps* caps) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  caps = gst_caps_truncate(gst_caps_make_writable(caps));
  const Published pub = published(self);
  h3src::fixate_video_caps(caps, pub.plan, pub.fps_n, pub.fps_d);
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
  const Published pub = published(self);
  const bool have_plan = pub.have_plan;
  const h3::ClipPlan& plan = pub.plan;
  const gint fn = pub.fps_n, fd = pub.fps_d;
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
  if (!p->writer.configure(info)) {
    GST_ERROR_OBJECT(self, "no conversion from RGB to %s", GST_VIDEO_INFO_NAME(&info));
    return FALSE;
  }
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

// Frames the stream will carry: the plan's (the num-frames property's until the
// plan is known), or fewer when num-buffers says so; -1: not known yet.
static int64_t stream_frames(GstH3VideoSrc* self) {
  const Published pub = published(self);
  int64_t n = pub.have_plan ? pub.plan.num_frames : pub.num_frames;
  const gint nb = GST_BASE_SRC(self)->num_buffers;
  if (nb >= 0 && (n < 0 || nb < n)) n = nb;
  return n;
}

// What the element needs as live latency: one frame, or the slowest chunk's
// decode time seen so far plus 5 %, whichever is more.
static GstClockTime live_latency(GstH3VideoSrc* self) {
  const Published pub = published(self);
  GstClockTime est = pub.fps_n > 0 ? h3src::frame_time(1, pub.fps_n, pub.fps_d) : 0;
  if (GST_CLOCK_TIME_IS_VALID(pub.chunk_time)) est = MAX(est, pub.chunk_time + pub.chunk_time / 20);
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
      const Published pub = published(self);
      if (format == GST_FORMAT_TIME && pub.fps_n > 0) {
        gst_query_set_duration(query, GST_FORMAT_TIME, h3src::frame_time(n, pub.fps_n, pub.fps_d));
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
      const GstVideoInfo& info = p->writer.info();
      if (GST_VIDEO_INFO_FORMAT(&info) == GST_VIDEO_FORMAT_UNKNOWN) break;
      if (!gst_video_info_convert(&info, src_fmt, src_val, dest_fmt, &dest_val)) return FALSE;
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
  GstTagList* tags = h3src::stream_tags(self->priv->active);
  // The base class queues TAG events and pushes them, in order, before the
  // next buffer. Called without the state lock that gst_element_send_event takes,
  // which a state change may be holding while it waits for this thread.
  GST_ELEMENT_CLASS(parent_class)->send_event(GST_ELEMENT(self), gst_event_new_tag(tags));
}

static void send_chunk_event(GstH3VideoSrc* self, const h3src::Frame& f, int64_t total_frames) {
  GstStructure* s = gst_structure_new("h3-chunk", "first-frame", G_TYPE_INT64, f.index, "total-frames",
                                      G_TYPE_INT64, total_frames, nullptr);
  GST_ELEMENT_CLASS(parent_class)
      ->send_event(GST_ELEMENT(self), gst_event_new_custom(GST_EVENT_CUSTOM_DOWNSTREAM, s));
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
  if (!GST_CLOCK_TIME_IS_VALID(p->stream.first_running)) {
    p->stream.first_running = now - pts;
    return;
  }
  const GstClockTime due = p->stream.first_running + pts + live_latency(self);
  if (now <= due) return;
  const GstClockTime late = now - due;
  GstMessage* m = gst_message_new_qos(GST_OBJECT(self), TRUE, now, pts, pts, duration);
  gst_message_set_qos_values(m, static_cast<gint64>(late), 1.0, 1000000);
  gst_message_set_qos_stats(m, GST_FORMAT_BUFFERS, static_cast<guint64>(n), 0);
  gst_element_post_message(GST_ELEMENT(self), m);
  if (!p->stream.warned_late) {
    p->stream.warned_late = true;
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

// The frame the engine delivers next, or why there is none.
static GstFlowReturn pop_frame(GstH3VideoSrc* self, const h3::ClipPlan& plan, h3src::Frame* f) {
  H3VideoSrcPrivate* p = self->priv;
  h3gst::Failure failure;
  switch (p->generation.pop(f, &failure)) {
    case h3src::FrameQueue::PopResult::kFrame: break;
    case h3src::FrameQueue::PopResult::kFlushing: return GST_FLOW_FLUSHING;
    case h3src::FrameQueue::PopResult::kEnd:
      GST_ELEMENT_ERROR(
          self, STREAM, FAILED,
          ("The engine ended the clip after %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT " frames",
           p->stream.frame_n, plan.num_frames),
          (nullptr));
      return GST_FLOW_ERROR;
    case h3src::FrameQueue::PopResult::kError:
      h3src::post_failure(GST_ELEMENT(self), failure, "Generation failed");
      return GST_FLOW_ERROR;
  }
  if (f->index != p->stream.frame_n || f->width != plan.width || f->height != plan.height) {
    GST_ELEMENT_ERROR(
        self, STREAM, FAILED, ("The engine delivered an unexpected frame"),
        ("frame %" G_GINT64_FORMAT " (%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "), expected %" G_GINT64_FORMAT,
         f->index, f->width, f->height, p->stream.frame_n));
    return GST_FLOW_ERROR;
  }
  return GST_FLOW_OK;
}

// The base class allocated `buf` from the negotiated pool; the next frame goes in.
static GstFlowReturn gst_h3_video_src_fill(GstPushSrc* psrc, GstBuffer* buf) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(psrc);
  GstBaseSrc* bsrc = GST_BASE_SRC(psrc);
  H3VideoSrcPrivate* p = self->priv;

  if (p->generation.restart_pending()) {
    GST_DEBUG_OBJECT(self, "restarting the request after a flush");
    p->generation.restart();
    reset_stream_state(p);
  }
  const Published pub = published(self);
  // Live, the task may run before the async start completes. It may not block
  // here (gst_base_src_start_complete() needs the stream lock it holds): pause it;
  // the start's completion restarts it. The plan is published under the stream
  // lock together with that completion (ElementObserver::complete_start).
  if (!pub.have_plan) return GST_FLOW_FLUSHING;
  if (p->stream.frame_n >= pub.plan.num_frames) return GST_FLOW_EOS;

  h3src::Frame f;
  const GstFlowReturn popped = pop_frame(self, pub.plan, &f);
  if (popped != GST_FLOW_OK) return popped;
  if (!p->writer.write(f, buf)) {
    GST_ELEMENT_ERROR(self, RESOURCE, FAILED, ("Could not write a frame into the output buffer"), (nullptr));
    return GST_FLOW_ERROR;
  }

  const int64_t n = p->stream.frame_n;
  GST_BUFFER_PTS(buf) = h3src::frame_time(n, pub.fps_n, pub.fps_d);
  GST_BUFFER_DTS(buf) = GST_CLOCK_TIME_NONE;
  GST_BUFFER_DURATION(buf) = h3src::frame_time(n + 1, pub.fps_n, pub.fps_d) - GST_BUFFER_PTS(buf);
  GST_BUFFER_OFFSET(buf) = static_cast<guint64>(n);
  GST_BUFFER_OFFSET_END(buf) = static_cast<guint64>(n + 1);
  if (n == 0) GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_DISCONT);

  if (!p->stream.tags_sent) {
    send_tags(self);
    p->stream.tags_sent = true;
  }
  if (f.chunk_start) send_chunk_event(self, f, pub.plan.num_frames);
  if (f.chunk_start && gst_base_src_is_live(bsrc))
    check_lateness(self, n, GST_BUFFER_PTS(buf), GST_BUFFER_DURATION(buf));

  ++p->stream.frame_n;
  GST_LOG_OBJECT(self, "frame %" G_GINT64_FORMAT " pts %" GST_TIME_FORMAT, n,
                 GST_TIME_ARGS(GST_BUFFER_PTS(buf)));
  return GST_FLOW_OK;
}

// ---------------------------------------------------------------------------
// The generation's worker
// ---------------------------------------------------------------------------

namespace {

// A live source's streaming task may already be running (PLAYING comes before
// the model is loaded): its fill() returns FLUSHING until the plan is known,
// but once it sees the plan it blocks in the frame queue, holding the stream
// lock, while gst_base_src_start_complete() needs that lock and the frames come
// only after it returns. So the plan is published and the start completed
// while this thread holds the (recursive) stream lock: fill() sees either no
// plan, or a plan with the start already complete.
void ElementObserver::complete_start(const h3::ClipPlan* plan) {
  H3VideoSrcPrivate* p = self_->priv;
  GstPad* pad = GST_BASE_SRC_PAD(self_);
  GST_PAD_STREAM_LOCK(pad);
  if (plan) {
    GST_OBJECT_LOCK(self_);
    p->pub.plan = *plan;
    p->pub.have_plan = true;
    p->pub.num_frames = plan->num_frames;
    if (p->active.fps_n <= 0) {
      p->pub.fps_n = plan->fps_n;
      p->pub.fps_d = plan->fps_d;
    }
    GST_OBJECT_UNLOCK(self_);
  }
  gst_base_src_start_complete(GST_BASE_SRC(self_), plan ? GST_FLOW_OK : GST_FLOW_ERROR);
  GST_PAD_STREAM_UNLOCK(pad);
}

void ElementObserver::chunk_decoded(std::chrono::nanoseconds time) {
  H3VideoSrcPrivate* p = self_->priv;
  const auto t = static_cast<GstClockTime>(time.count());
  bool post = false;
  GST_OBJECT_LOCK(self_);
  Published& pub = p->pub;
  if (!GST_CLOCK_TIME_IS_VALID(pub.chunk_time) || t > pub.chunk_time) pub.chunk_time = t;
  // Like a re-measured processing deadline: tell the pipeline when the estimate
  // moved by more than a quarter.
  const GstClockTime est = pub.chunk_time;
  if (p->active.live &&
      (!GST_CLOCK_TIME_IS_VALID(pub.reported_latency) || est > pub.reported_latency * 5 / 4)) {
    pub.reported_latency = est;
    post = true;
  }
  GST_OBJECT_UNLOCK(self_);
  if (post) gst_element_post_message(element(), gst_message_new_latency(GST_OBJECT(self_)));
}

}  // namespace
