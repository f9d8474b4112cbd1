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
 * gst-launch-1.0 h3videosrc prompt="a green square moving down on a white background" num-frames=73 ! \
 *     videoconvert ! video/x-raw,format=I420 ! x264enc ! mp4mux ! filesink location=clip.mp4
 * ]| Generates 73 frames with the installed tiny model and writes an H.264 MP4.
 * |[
 * gst-launch-1.0 h3videosrc seed=7 ! videoconvert ! autovideosink
 * ]| Shows a clip as it is generated.
 *
 * Since: 0.1
 */
#include "gsth3videosrc.h"

#include <gst/video/video.h>

#include "caps.h"
#include "frame_writer.h"
#include "lifecycle.h"
#include "live_timing.h"
#include "messages.h"
#include "queries.h"
#include "tags.h"
#include "video_pool.h"

GST_DEBUG_CATEGORY_STATIC(gst_h3_video_src_debug);
#define GST_CAT_DEFAULT gst_h3_video_src_debug

static GstStaticPadTemplate src_template =
    GST_STATIC_PAD_TEMPLATE("src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS(H3_VIDEO_CAPS));

// h3videosrc's instance state: the lifecycle it shares with h3src (properties, settings
// snapshot, generation, published plan; lifecycle.h) and its streaming thread's own state.
// Locks: docs/element.md, "Locks".
struct H3VideoSrcPrivate {
  explicit H3VideoSrcPrivate(GstH3VideoSrc* self);

  h3gst::Lifecycle lifecycle;

  // The streaming thread only (and start()/stop(), while it does not run).
  h3gst::FrameWriter writer;  // the negotiated format and the conversion to it
  // What it knows about the stream it is producing: reset at start and when a flush generates
  // the clip again.
  struct Stream {
    int64_t frame_n = 0;  // the next frame's index in the clip
    bool tags_sent = false;
  } stream;
  // Live only: the frames' running times and their wait for the clock (fill() waits; the state
  // changes and flushes wake it), and the lateness of a chunk. No get_times: the base class
  // neither syncs nor re-stamps.
  h3gst::LiveClock live_clock;
  h3gst::LivePacer pacer{live_clock, 0};
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
static GstFlowReturn gst_h3_video_src_fill(GstPushSrc* psrc, GstBuffer* buf);
static GstPadProbeReturn frame_out(GstPad* pad, GstPadProbeInfo* info, gpointer data);
static void complete_start(GstH3VideoSrc* self, const h3::ClipPlan* plan);
static void gst_h3_video_src_set_context(GstElement* element, GstContext* context);

static void gst_h3_video_src_class_init(GstH3VideoSrcClass* klass) {
  GObjectClass* gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  GstBaseSrcClass* basesrc_class = GST_BASE_SRC_CLASS(klass);
  GstPushSrcClass* pushsrc_class = GST_PUSH_SRC_CLASS(klass);

  GST_DEBUG_CATEGORY_INIT(gst_h3_video_src_debug, "h3videosrc", 0, "H3 video generator source");

  gobject_class->finalize = gst_h3_video_src_finalize;
  gobject_class->set_property = gst_h3_video_src_set_property;
  gobject_class->get_property = gst_h3_video_src_get_property;
  h3gst::install_properties(gobject_class);

  gst_element_class_set_static_metadata(
      element_class, "H3 video generator", "Source/Video",
      "Generates video from a text prompt with the MiniMax-H3 diffusion model, "
      "pushing each decoded chunk as it is produced",
      "gst-h3 developers");
  gst_element_class_add_static_pad_template(element_class, &src_template);

  h3gst::register_tags();

  element_class->change_state = GST_DEBUG_FUNCPTR(gst_h3_video_src_change_state);
  element_class->send_event = GST_DEBUG_FUNCPTR(gst_h3_video_src_send_event);
  element_class->set_context = GST_DEBUG_FUNCPTR(gst_h3_video_src_set_context);

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
  pushsrc_class->fill = GST_DEBUG_FUNCPTR(gst_h3_video_src_fill);
}

H3VideoSrcPrivate::H3VideoSrcPrivate(GstH3VideoSrc* self)
    : lifecycle(GST_ELEMENT(self), gst_h3_video_src_debug,
                [self](const h3::ClipPlan* plan) { complete_start(self, plan); }) {}

static void gst_h3_video_src_init(GstH3VideoSrc* self) {
  self->priv = new H3VideoSrcPrivate(self);
  gst_base_src_set_format(GST_BASE_SRC(self), GST_FORMAT_TIME);
  gst_base_src_set_live(GST_BASE_SRC(self), self->priv->lifecycle.live_property());
  // The engine opens in start(), on a thread of its own: READY -> PAUSED returns at once.
  gst_base_src_set_async(GST_BASE_SRC(self), TRUE);
  // What goes out, as it goes out (frame_out).
  gst_pad_add_probe(GST_BASE_SRC_PAD(self), GST_PAD_PROBE_TYPE_BUFFER, frame_out, self, nullptr);
}

static void gst_h3_video_src_finalize(GObject* object) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(object);
  delete self->priv;  // the generation joins its worker (stop() did already) and releases the engine
  self->priv = nullptr;
  G_OBJECT_CLASS(parent_class)->finalize(object);
}

// ---- Properties (settings.h, under the object lock in the lifecycle) ----

static void gst_h3_video_src_set_property(GObject* object, guint prop_id, const GValue* value,
                                          GParamSpec* pspec) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(object);
  if (!self->priv->lifecycle.set_property(prop_id, value, pspec)) {
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
    return;
  }
  // GstBaseSrc decides NO_PREROLL before start() runs: tell it now.
  if (prop_id == h3gst::PROP_IS_LIVE)
    gst_base_src_set_live(GST_BASE_SRC(self), self->priv->lifecycle.live_property());
}

static void gst_h3_video_src_get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  if (!GST_H3_VIDEO_SRC(object)->priv->lifecycle.get_property(prop_id, value))
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
}

// ---- States: start, stop, unlock ----

static gboolean gst_h3_video_src_start(GstBaseSrc* bsrc) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  H3VideoSrcPrivate* p = self->priv;
  p->stream = {};
  p->pacer.reset(gst_base_src_is_live(bsrc));
  p->live_clock.reset();
  // A live source's task starts at PAUSED -> PLAYING, possibly before the async start is
  // complete: it must not negotiate before the plan fixes size and rate. Clear the pad's initial
  // reconfigure flag; gst_base_src_start_complete() sets it again once the plan is known (and
  // fill() waits for that).
  gst_pad_check_reconfigure(GST_BASE_SRC_PAD(bsrc));
  return p->lifecycle.start(/*audio=*/false);
}

// GstBaseSrc calls stop() only for a start that completed, so a failed async start is
// cleaned up from PAUSED -> READY too (Lifecycle::stop is idempotent).
static void stop_running(GstH3VideoSrc* self) {
  self->priv->lifecycle.stop();
  self->priv->writer.reset();
}

static gboolean gst_h3_video_src_stop(GstBaseSrc* bsrc) {
  stop_running(GST_H3_VIDEO_SRC(bsrc));
  return TRUE;
}

static GstStateChangeReturn gst_h3_video_src_change_state(GstElement* element, GstStateChange transition) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(element);
  // A live fill() waiting for its frame's time holds it across a pause; the base class deactivates
  // the pad (and joins the streaming thread) when going to READY, so that wait ends first. The
  // pipeline set the new base time before PLAYING reaches the element.
  switch (transition) {
    case GST_STATE_CHANGE_PAUSED_TO_PLAYING: self->priv->live_clock.set_playing(true); break;
    case GST_STATE_CHANGE_PLAYING_TO_PAUSED: self->priv->live_clock.set_playing(false); break;
    case GST_STATE_CHANGE_PAUSED_TO_READY: self->priv->live_clock.stop(); break;
    default: break;
  }
  GstStateChangeReturn ret = GST_ELEMENT_CLASS(parent_class)->change_state(element, transition);
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY) stop_running(self);
  if (transition == GST_STATE_CHANGE_READY_TO_NULL) self->priv->lifecycle.close_engine();
  return ret;
}

static gboolean gst_h3_video_src_unlock(GstBaseSrc* bsrc) {
  GST_LOG_OBJECT(bsrc, "unlock");
  GST_H3_VIDEO_SRC(bsrc)->priv->lifecycle.set_flushing(true);
  return TRUE;
}

static gboolean gst_h3_video_src_unlock_stop(GstBaseSrc* bsrc) {
  GST_LOG_OBJECT(bsrc, "unlock stop");
  GST_H3_VIDEO_SRC(bsrc)->priv->lifecycle.set_flushing(false);
  return TRUE;
}

// ---- Events, caps, allocation, queries ----

// Seeks are refused (Lifecycle::refuses_seek).
static gboolean gst_h3_video_src_is_seekable(GstBaseSrc*) {
  return FALSE;
}

// Events sent to the element and events arriving on its pad: false refuses it. A flush throws
// away what was generated: the next fill() generates the clip again from the first frame. A QoS
// event (a sink got a frame late) goes to the base class, which takes it, and changes nothing: no
// frame is dropped and no chunk skipped, since a chunk's frames all exist once it is made and the
// next chunk is made from it (the lateness the element sees itself is reported: live_timing.h);
// with pace=steps its lateness feeds the policy that sets the forwards per chunk (pace_policy.h).
static bool accept_event(GstH3VideoSrc* self, GstEvent* event) {
  if (self->priv->lifecycle.refuses_seek(event)) return false;
  switch (GST_EVENT_TYPE(event)) {
    case GST_EVENT_FLUSH_START:
      self->priv->lifecycle.flush_start();
      self->priv->live_clock.stop();  // a fill() waiting for the clock returns FLUSHING
      return true;
    case GST_EVENT_FLUSH_STOP:
      // The clip starts again with a new anchor (the restart resets the stream in fill()).
      self->priv->live_clock.reset(GST_STATE(self) == GST_STATE_PLAYING);
      return true;
    case GST_EVENT_QOS:
      // pace=steps: downstream's lateness feeds the policy (no frame is dropped either way).
      self->priv->lifecycle.downstream_qos(event);
      return true;
    default: return true;
  }
}

static gboolean gst_h3_video_src_send_event(GstElement* element, GstEvent* event) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(element);
  bool accepted = false;  // an h3-prompt event's answer; false for one accept_event refuses
  if (self->priv->lifecycle.prompt_event(event, &accepted) || !accept_event(self, event)) {
    gst_event_unref(event);
    return accepted;
  }
  return GST_ELEMENT_CLASS(parent_class)->send_event(element, event);
}

static gboolean gst_h3_video_src_event(GstBaseSrc* bsrc, GstEvent* event) {
  if (!accept_event(GST_H3_VIDEO_SRC(bsrc), event)) return FALSE;
  return GST_BASE_SRC_CLASS(parent_class)->event(bsrc, event);
}

// Before the plan is known, the template; then exactly the planned size and rate.
static GstCaps* gst_h3_video_src_get_caps(GstBaseSrc* bsrc, GstCaps* filter) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  GstCaps* caps = gst_pad_get_pad_template_caps(GST_BASE_SRC_PAD(bsrc));
  const h3gst::Published pub = self->priv->lifecycle.published();
  if (pub.have_plan) caps = h3gst::planned_video_caps(caps, pub.plan, pub.fps_n, pub.fps_d);
  return h3gst::filter_caps(caps, filter);
}

static GstCaps* gst_h3_video_src_fixate(GstBaseSrc* bsrc, GstCaps* caps) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  caps = gst_caps_truncate(gst_caps_make_writable(caps));
  const h3gst::Published pub = self->priv->lifecycle.published();
  h3gst::fixate_video_caps(caps, pub.plan, pub.fps_n, pub.fps_d);
  return GST_BASE_SRC_CLASS(parent_class)->fixate(bsrc, caps);
}

static gboolean gst_h3_video_src_set_caps(GstBaseSrc* bsrc, GstCaps* caps) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  GstVideoInfo info;
  if (!gst_video_info_from_caps(&info, caps)) {
    GST_ERROR_OBJECT(self, "cannot parse caps %" GST_PTR_FORMAT, static_cast<void*>(caps));
    return FALSE;
  }
  const h3gst::Published pub = self->priv->lifecycle.published();
  if (!pub.have_plan || !h3gst::caps_match_plan(info, pub.plan, pub.fps_n, pub.fps_d)) {
    GST_WARNING_OBJECT(self,
                       "caps %" GST_PTR_FORMAT " do not match the planned clip (%" G_GINT64_FORMAT
                       "x%" G_GINT64_FORMAT " at %d/%d, square pixels, progressive)",
                       static_cast<void*>(caps), pub.plan.width, pub.plan.height, pub.fps_n, pub.fps_d);
    return FALSE;
  }
  if (!self->priv->writer.configure(info)) {
    GST_ERROR_OBJECT(self, "no conversion from RGB to %s", GST_VIDEO_INFO_NAME(&info));
    return FALSE;
  }
  GST_DEBUG_OBJECT(self, "negotiated %" GST_PTR_FORMAT, static_cast<void*>(caps));
  return TRUE;
}

static gboolean gst_h3_video_src_decide_allocation(GstBaseSrc* bsrc, GstQuery* query) {
  if (!h3gst::decide_video_pool(GST_ELEMENT(bsrc), query)) return FALSE;
  return GST_BASE_SRC_CLASS(parent_class)->decide_allocation(bsrc, query);
}

// An "h3.engine" context: the engine this element uses at its next start when its options agree
// (shared_engine.h).
static void gst_h3_video_src_set_context(GstElement* element, GstContext* context) {
  GST_H3_VIDEO_SRC(element)->priv->lifecycle.set_context(context);
  GST_ELEMENT_CLASS(parent_class)->set_context(element, context);
}

static gboolean gst_h3_video_src_query(GstBaseSrc* bsrc, GstQuery* query) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(bsrc);
  switch (GST_QUERY_TYPE(query)) {
    case GST_QUERY_CUSTOM:
      if (self->priv->lifecycle.answer_record_query(query)) return TRUE;
      break;
    case GST_QUERY_CONTEXT:
      if (self->priv->lifecycle.answer_context_query(query)) return TRUE;
      break;
    case GST_QUERY_DURATION:
      if (h3gst::answer_frames_duration(query, self->priv->lifecycle.published(), bsrc->num_buffers))
        return TRUE;
      break;
    case GST_QUERY_CONVERT: {
      GstFormat src_fmt, dest_fmt;
      gint64 src_val, dest_val;
      gst_query_parse_convert(query, &src_fmt, &src_val, &dest_fmt, &dest_val);
      const GstVideoInfo& info = self->priv->writer.info();
      if (GST_VIDEO_INFO_FORMAT(&info) == GST_VIDEO_FORMAT_UNKNOWN) break;
      if (!gst_video_info_convert(&info, src_fmt, src_val, dest_fmt, &dest_val)) return FALSE;
      gst_query_set_convert(query, src_fmt, src_val, dest_fmt, dest_val);
      return TRUE;
    }
    case GST_QUERY_LATENCY: {
      if (!gst_base_src_is_live(bsrc)) break;
      // A chunk's frames exist only once the whole chunk is decoded: report the slowest chunk
      // seen (plus 5 %), at least one frame, at least what the base class measured at start-up.
      if (!GST_BASE_SRC_CLASS(parent_class)->query(bsrc, query)) return FALSE;
      h3gst::answer_live_latency(query, self->priv->lifecycle.published());
      GST_DEBUG_OBJECT(self, "latency %" GST_PTR_FORMAT, static_cast<void*>(query));
      return TRUE;
    }
    default: break;
  }
  return GST_BASE_SRC_CLASS(parent_class)->query(bsrc, query);
}

// ---- Streaming ----

// The base class queues TAG and custom downstream events and pushes them, in order, before the
// next buffer. Called without the state lock that gst_element_send_event takes, which a state
// change may be holding while it waits for this thread.
static void send_downstream(GstH3VideoSrc* self, GstEvent* event) {
  GST_ELEMENT_CLASS(parent_class)->send_event(GST_ELEMENT(self), event);
}

// The base class allocated `buf` from the negotiated pool; the next frame goes in.
static GstFlowReturn gst_h3_video_src_fill(GstPushSrc* psrc, GstBuffer* buf) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(psrc);
  H3VideoSrcPrivate* p = self->priv;

  if (p->lifecycle.restart_if_flushed()) {
    p->stream = {};
    p->pacer.restart();
  }
  h3gst::Published pub = p->lifecycle.published();
  // Live, the task may run before the async start completes. It may not block here
  // (gst_base_src_start_complete() needs the stream lock it holds): pause it; the start's
  // completion restarts it. The plan is published under the stream lock together with that
  // completion (complete_start below).
  if (!pub.have_plan) return GST_FLOW_FLUSHING;
  if (!pub.plan.endless && p->stream.frame_n >= pub.plan.num_frames) return GST_FLOW_EOS;

  h3gst::Frame f;
  switch (p->lifecycle.pop_frame(&f, p->stream.frame_n, &pub)) {
    case h3gst::Lifecycle::Pop::kData: break;
    case h3gst::Lifecycle::Pop::kFlushing: return GST_FLOW_FLUSHING;
    case h3gst::Lifecycle::Pop::kEnd:
      if (pub.plan.endless) return GST_FLOW_EOS;  // finished, or the longest stream's end
      p->lifecycle.ended_complete(p->stream.frame_n, pub.plan.num_frames, "frames");
      return GST_FLOW_ERROR;  // frames were still due (the count check above)
    case h3gst::Lifecycle::Pop::kError: return GST_FLOW_ERROR;
  }
  if (!p->writer.write(f, buf, GST_ELEMENT(self))) return GST_FLOW_ERROR;
  const int64_t n = p->stream.frame_n;
  h3gst::Lifecycle::stamp_frame(buf, n, pub.fps_n, pub.fps_d);
  if (!p->stream.tags_sent) {
    send_downstream(self, gst_event_new_tag(h3gst::stream_tags(p->lifecycle.record().get())));
    p->stream.tags_sent = true;
  }
  ++p->stream.frame_n;
  // Live: in PLAYING only, once the clock reaches the frame's running time; held across a pause.
  GstClockTimeDiff late = 0;
  if (!p->pacer.pace(GST_ELEMENT(self), buf, f.chunk_start ? &pub : nullptr, n, &late))
    return GST_FLOW_FLUSHING;
  // pace=steps: a chunk's lateness steers its forwards per chunk (chunk 0 anchors the stream).
  if (f.chunk_start && f.index > 0) {
    p->lifecycle.chunk_paced(f.index / h3::dit::kChunkFrames, gst_base_src_is_live(GST_BASE_SRC(self))
                                                                  ? std::optional<GstClockTimeDiff>(late)
                                                                  : std::nullopt);
  }
  if (f.chunk_start) send_downstream(self, h3gst::chunk_event(f.index, pub.plan.num_frames));
  GST_LOG_OBJECT(self, "frame %" G_GINT64_FORMAT " pts %" GST_TIME_FORMAT, n,
                 GST_TIME_ARGS(GST_BUFFER_PTS(buf)));
  return GST_FLOW_OK;
}

// Every buffer as it goes out, with the running time it goes out with (its PTS in the base class's
// segment): the lifecycle reports a prompt change when its chunk's first frame is really pushed
// (a frame fill() made may still be dropped by the base class, at an application's EOS or a flush).
static GstPadProbeReturn frame_out(GstPad*, GstPadProbeInfo* info, gpointer data) {
  GstH3VideoSrc* self = GST_H3_VIDEO_SRC(data);
  GstBuffer* buf = GST_PAD_PROBE_INFO_BUFFER(info);
  GST_OBJECT_LOCK(self);
  const GstClockTime running_time =
      gst_segment_to_running_time(&GST_BASE_SRC(self)->segment, GST_FORMAT_TIME, GST_BUFFER_PTS(buf));
  GST_OBJECT_UNLOCK(self);
  self->priv->lifecycle.frame_pushed(static_cast<int64_t>(GST_BUFFER_OFFSET(buf)), running_time);
  return GST_PAD_PROBE_OK;
}

// On the generation's worker. A live source's streaming task may already be running (PLAYING
// comes before the model is loaded): its fill() returns FLUSHING until the plan is known, but once
// it sees the plan it blocks in the frame queue, holding the stream lock, while
// gst_base_src_start_complete() needs that lock and the frames come only after it returns. So
// the plan is published and the start completed while this thread holds the (recursive) stream
// lock: fill() sees either no plan, or a plan with the start already complete.
static void complete_start(GstH3VideoSrc* self, const h3::ClipPlan* plan) {
  GstPad* pad = GST_BASE_SRC_PAD(self);
  GST_PAD_STREAM_LOCK(pad);
  if (plan) self->priv->lifecycle.publish_plan(*plan);
  gst_base_src_start_complete(GST_BASE_SRC(self), plan ? GST_FLOW_OK : GST_FLOW_ERROR);
  GST_PAD_STREAM_UNLOCK(pad);
}
