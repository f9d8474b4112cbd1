/**
 * SECTION:element-h3src
 * @title: h3src
 *
 * Generates a clip with its soundtrack from a text prompt (or precomputed prompt
 * embeddings) with the MiniMax-H3 model: raw video on the `video` pad, raw stereo
 * audio at 32 kHz on the `audio` pad. The engine hands each decoded video chunk
 * over together with the stretch of the soundtrack that goes with it; each pad
 * pushes from a bounded queue of its own on a task of its own, so a pad whose
 * downstream is slow holds back the engine (memory stays bounded) but never the
 * other pad's queued data. Both pads start at running time 0 and end with EOS.
 *
 * Properties are h3videosrc's; is-live=true is not supported (use h3videosrc).
 * A model folder without audio_vae/ cannot make a soundtrack: the element posts
 * an error naming the folder.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 h3src name=s s.video ! queue ! videoconvert ! x264enc ! mux. \
 *     s.audio ! queue ! audioconvert ! avenc_aac ! mux. mp4mux name=mux ! filesink location=clip.mp4
 * ]| Writes an MP4 with H.264 video and AAC audio.
 *
 * Since: 0.2
 */
#include "gsth3src.h"

#include <gst/audio/audio.h>
#include <gst/video/video.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>

#include "element_common.h"
#include "frame_writer.h"
#include "generation.h"
#include "h3videosrc_messages.h"
#include "h3videosrc_settings.h"

GST_DEBUG_CATEGORY_STATIC(gst_h3_src_debug);
#define GST_CAT_DEFAULT gst_h3_src_debug

namespace {

constexpr gint kAudioRate = 32000;  // the audio VAE's rate (docs/h3-model.md §9)
constexpr gint kAudioChannels = 2;
// Sample frames per audio buffer: 32 ms, about what audio sources usually push, so that
// downstream queues measured in buffers or time hold a sensible amount.
constexpr int64_t kAudioBufferSamples = 1024;

}  // namespace

static GstStaticPadTemplate video_template = GST_STATIC_PAD_TEMPLATE(
    "video", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS(GST_VIDEO_CAPS_MAKE("{ RGB, RGBA, BGRx, I420 }")));

static GstStaticPadTemplate audio_template =
    GST_STATIC_PAD_TEMPLATE("audio", GST_PAD_SRC, GST_PAD_ALWAYS,
                            GST_STATIC_CAPS("audio/x-raw, format = (string) { F32LE, S16LE }, "
                                            "rate = (int) 32000, channels = (int) 2, "
                                            "layout = (string) interleaved, channel-mask = (bitmask) 0x3"));

namespace {

// The generation's steps turned into bus messages, and the plan published for the pads.
class SrcObserver : public h3src::PostingObserver {
 public:
  explicit SrcObserver(GstH3Src* self) : PostingObserver(GST_ELEMENT(self)), self_(self) {}
  void complete_start(const h3::ClipPlan* plan) override;
  // h3src is never live: no latency to derive from the decode times.
  void chunk_decoded(std::chrono::nanoseconds) override {}

 private:
  GstH3Src* self_;
};

struct Published {
  bool have_plan = false;
  h3::ClipPlan plan{};
  gint fps_n = 24, fps_d = 1;  // the framerate property's rate, else the plan's
};

// A pad's streaming state: its task only (and the state changes while no task runs).
struct PadStream {
  bool configured = false;       // stream-start, caps, segment and tags went out
  bool need_segment = false;     // a flush removed the segment: send it again before data
  bool downstream_done = false;  // downstream returned EOS: drain the queue without pushing
  int64_t next = 0;              // the next frame's (video) or sample frame's (audio) index
};

}  // namespace

// h3src's instance state. Threads: the application's (properties, state changes, events),
// the generation's worker (engine; fills both queues), the video pad's task and the audio
// pad's task (each pops its own queue and pushes downstream). Locks, in this order: the
// generation's lock (generation.h), GST_OBJECT_LOCK (`pub`); `prop_lock` guards `props` and
// `started` and is never held with another; the queues' own locks are innermost. A pad's task
// blocks only in its own queue's pop() or its own gst_pad_push(); the worker blocks only in a
// queue's push(), the audio one first (generation.h says why that cannot deadlock a muxer).
struct H3SrcPrivate {
  explicit H3SrcPrivate(GstH3Src* self) : observer(self), generation(observer) {}

  std::mutex prop_lock;
  h3src::Settings props;
  bool started = false;

  h3src::Settings active;  // copied from `props` at start; read-only while started

  SrcObserver observer;
  h3src::Generation generation;

  GstPad* video_pad = nullptr;
  GstPad* audio_pad = nullptr;
  guint group_id = 0;  // both pads' streams are one group
  // The pads' tasks were started (READY -> PAUSED) and not stopped yet: a flush-stop starts
  // them again. Written by state changes, read by flush-stop.
  std::atomic<bool> started_tasks{false};

  Published pub;  // GST_OBJECT_LOCK

  std::atomic<bool> failure_posted{false};  // the generation's failure reaches both pads: post it once
  std::atomic<bool> eos_requested{false};   // an EOS event was sent to the element

  // The video pad's task only.
  PadStream video;
  h3src::FrameWriter writer;
  // The audio pad's task only.
  PadStream audio;
  bool s16 = false;  // negotiated S16LE (else F32LE)
};

struct _GstH3Src {
  GstElement parent;
  H3SrcPrivate* priv;
};

#define gst_h3_src_parent_class parent_class
G_DEFINE_TYPE(GstH3Src, gst_h3_src, GST_TYPE_ELEMENT);
GST_ELEMENT_REGISTER_DEFINE(h3src, "h3src", GST_RANK_NONE, GST_TYPE_H3_SRC);

static void gst_h3_src_finalize(GObject* object);
static void gst_h3_src_set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec);
static void gst_h3_src_get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec);
static GstStateChangeReturn gst_h3_src_change_state(GstElement* element, GstStateChange transition);
static gboolean gst_h3_src_send_event(GstElement* element, GstEvent* event);
static gboolean gst_h3_src_pad_query(GstPad* pad, GstObject* parent, GstQuery* query);
static gboolean gst_h3_src_pad_event(GstPad* pad, GstObject* parent, GstEvent* event);
static void gst_h3_src_video_loop(gpointer data);
static void gst_h3_src_audio_loop(gpointer data);

static void gst_h3_src_class_init(GstH3SrcClass* klass) {
  GObjectClass* gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);

  GST_DEBUG_CATEGORY_INIT(gst_h3_src_debug, "h3src", 0, "H3 video and audio generator source");

  gobject_class->finalize = gst_h3_src_finalize;
  gobject_class->set_property = gst_h3_src_set_property;
  gobject_class->get_property = gst_h3_src_get_property;
  h3src::install_properties(gobject_class);

  gst_element_class_set_static_metadata(
      element_class, "H3 video and audio generator", "Source/Audio/Video",
      "Generates video with its soundtrack from a text prompt with the MiniMax-H3 diffusion model, "
      "pushing each decoded chunk's frames and audio as they are produced",
      "gst-h3 developers");
  gst_element_class_add_static_pad_template(element_class, &video_template);
  gst_element_class_add_static_pad_template(element_class, &audio_template);
  h3src::register_tags();

  element_class->change_state = GST_DEBUG_FUNCPTR(gst_h3_src_change_state);
  element_class->send_event = GST_DEBUG_FUNCPTR(gst_h3_src_send_event);
}

static GstPad* make_pad(GstH3Src* self, GstStaticPadTemplate* templ) {
  GstPad* pad = gst_pad_new_from_static_template(templ, templ->name_template);
  gst_pad_set_query_function(pad, GST_DEBUG_FUNCPTR(gst_h3_src_pad_query));
  gst_pad_set_event_function(pad, GST_DEBUG_FUNCPTR(gst_h3_src_pad_event));
  gst_pad_use_fixed_caps(pad);
  gst_element_add_pad(GST_ELEMENT(self), pad);
  return pad;
}

static void gst_h3_src_init(GstH3Src* self) {
  self->priv = new H3SrcPrivate(self);
  self->priv->video_pad = make_pad(self, &video_template);
  self->priv->audio_pad = make_pad(self, &audio_template);
  GST_OBJECT_FLAG_SET(self, GST_ELEMENT_FLAG_SOURCE);
}

static void gst_h3_src_finalize(GObject* object) {
  GstH3Src* self = GST_H3_SRC(object);
  delete self->priv;  // the generation joins its worker (stop did already) and releases the engine
  self->priv = nullptr;
  G_OBJECT_CLASS(parent_class)->finalize(object);
}

// ---------------------------------------------------------------------------
// Properties (h3videosrc_settings.cpp)
// ---------------------------------------------------------------------------

static void gst_h3_src_set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec) {
  GstH3Src* self = GST_H3_SRC(object);
  H3SrcPrivate* p = self->priv;
  const std::unique_lock<std::mutex> lock =
      h3src::lock_for_change(GST_ELEMENT(self), pspec, p->prop_lock, p->started);
  if (!lock.owns_lock()) return;
  if (!h3src::set_property(&p->props, prop_id, value))
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
}

static void gst_h3_src_get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  GstH3Src* self = GST_H3_SRC(object);
  std::lock_guard<std::mutex> lock(self->priv->prop_lock);
  if (!h3src::get_property(self->priv->props, prop_id, value))
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
}

// ---------------------------------------------------------------------------
// States
// ---------------------------------------------------------------------------

static Published published(GstH3Src* self) {
  GST_OBJECT_LOCK(self);
  const Published pub = self->priv->pub;
  GST_OBJECT_UNLOCK(self);
  return pub;
}

// READY -> PAUSED, before the pads are activated: checks the settings and starts the
// generation's worker (the engine loads on it; the pads' tasks wait for the first data).
static bool start(GstH3Src* self) {
  H3SrcPrivate* p = self->priv;
  {
    std::lock_guard<std::mutex> lock(p->prop_lock);
    p->active = p->props;
  }
  const h3src::Settings& s = p->active;
  if (!h3src::check_settings(GST_ELEMENT(self), s)) return false;
  if (s.live) {
    GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS,
                      ("h3src does not support is-live=true: use h3videosrc is-live=true for a live "
                       "video-only stream, or is-live=false"),
                      (nullptr));
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(p->prop_lock);
    p->started = true;
  }
  p->video = PadStream();
  p->audio = PadStream();
  p->s16 = false;
  p->failure_posted = false;
  p->eos_requested = false;
  p->group_id = gst_util_group_id_next();
  GST_OBJECT_LOCK(self);
  p->pub = Published();
  if (s.fps_n > 0) {
    p->pub.fps_n = s.fps_n;
    p->pub.fps_d = s.fps_d;
  }
  GST_OBJECT_UNLOCK(self);

  h3src::post_open_progress(GST_ELEMENT(self), GST_PROGRESS_TYPE_START, "opening the H3 engine");
  h3src::Generation::Request request;
  request.plugin_dir = h3src::plugin_dir_of(GST_ELEMENT(self));
  request.engine = h3src::to_engine_options(s);
  request.clip = h3src::to_request(s);
  request.clip.audio = true;
  request.queue_chunks = static_cast<size_t>(s.queue_chunks);
  p->generation.set_flushing(false);
  p->generation.start(std::move(request));
  return true;
}

// PAUSED -> READY, before the pads are deactivated: wakes both tasks (a task blocked in
// its queue returns at once; one blocked downstream is released by downstream, which
// changed state before this element) and joins them.
static void stop_tasks(GstH3Src* self) {
  H3SrcPrivate* p = self->priv;
  p->started_tasks = false;
  p->generation.set_flushing(true);
  gst_pad_stop_task(p->video_pad);
  gst_pad_stop_task(p->audio_pad);
}

// Idempotent: after the tasks stopped, or after a start that failed.
static void stop_running(GstH3Src* self) {
  H3SrcPrivate* p = self->priv;
  p->generation.stop();
  p->generation.set_flushing(false);
  p->writer.reset();
  GST_OBJECT_LOCK(self);
  p->pub.have_plan = false;
  GST_OBJECT_UNLOCK(self);
  std::lock_guard<std::mutex> lock(p->prop_lock);
  p->started = false;
}

static GstStateChangeReturn gst_h3_src_change_state(GstElement* element, GstStateChange transition) {
  GstH3Src* self = GST_H3_SRC(element);
  H3SrcPrivate* p = self->priv;
  switch (transition) {
    case GST_STATE_CHANGE_READY_TO_PAUSED:
      if (!start(self)) {
        stop_running(self);
        return GST_STATE_CHANGE_FAILURE;
      }
      break;
    case GST_STATE_CHANGE_PAUSED_TO_READY: stop_tasks(self); break;
    default: break;
  }
  const GstStateChangeReturn ret = GST_ELEMENT_CLASS(parent_class)->change_state(element, transition);
  switch (transition) {
    case GST_STATE_CHANGE_READY_TO_PAUSED:
      if (ret == GST_STATE_CHANGE_FAILURE) {
        stop_running(self);
        break;
      }
      // The pads are active now: their tasks start, and wait for the engine's first chunk.
      p->started_tasks = true;
      gst_pad_start_task(p->video_pad, gst_h3_src_video_loop, self, nullptr);
      gst_pad_start_task(p->audio_pad, gst_h3_src_audio_loop, self, nullptr);
      break;
    case GST_STATE_CHANGE_PAUSED_TO_READY: stop_running(self); break;
    // The engine was kept for a restart from READY; NULL releases it (joins its rank threads).
    case GST_STATE_CHANGE_READY_TO_NULL: p->generation.close_engine(); break;
    default: break;
  }
  return ret;
}

// ---------------------------------------------------------------------------
// Events and queries
// ---------------------------------------------------------------------------

// A flush throws away what was generated, as with h3videosrc: flush-start cancels the request
// and wakes both tasks (blocked in their queues, or downstream, which the flush-start reaches);
// flush-stop waits for both to pause (their stream locks), generates the clip again from its
// first frame and starts them again.
static void flush_start(GstH3Src* self, GstEvent* event) {
  H3SrcPrivate* p = self->priv;
  p->generation.cancel();
  p->generation.set_flushing(true);
  gst_pad_push_event(p->video_pad, gst_event_ref(event));
  gst_pad_push_event(p->audio_pad, event);
}

static void flush_stop(GstH3Src* self, GstEvent* event) {
  H3SrcPrivate* p = self->priv;
  GST_PAD_STREAM_LOCK(p->video_pad);
  GST_PAD_STREAM_LOCK(p->audio_pad);
  gst_pad_push_event(p->video_pad, gst_event_ref(event));
  gst_pad_push_event(p->audio_pad, event);
  p->generation.set_flushing(false);
  if (p->generation.restart_pending()) {
    p->generation.restart();
    for (PadStream* stream : {&p->video, &p->audio}) {
      stream->next = 0;
      stream->downstream_done = false;
      stream->need_segment = stream->configured;
    }
  }
  const bool running = p->started_tasks;
  GST_PAD_STREAM_UNLOCK(p->audio_pad);
  GST_PAD_STREAM_UNLOCK(p->video_pad);
  if (running) {
    gst_pad_start_task(p->video_pad, gst_h3_src_video_loop, self, nullptr);
    gst_pad_start_task(p->audio_pad, gst_h3_src_audio_loop, self, nullptr);
  }
}

// Chunk k is computed from chunk k-1's state, so the clip cannot be entered in the middle:
// seeks are refused. An EOS sent to the element (gst-launch-1.0 -e) ends the clip early:
// the request is cancelled and both pads push EOS.
static gboolean gst_h3_src_send_event(GstElement* element, GstEvent* event) {
  GstH3Src* self = GST_H3_SRC(element);
  switch (GST_EVENT_TYPE(event)) {
    case GST_EVENT_FLUSH_START: flush_start(self, event); return TRUE;
    case GST_EVENT_FLUSH_STOP: flush_stop(self, event); return TRUE;
    case GST_EVENT_SEEK:
      GST_DEBUG_OBJECT(self, "refusing a seek: a generated clip is not seekable");
      gst_event_unref(event);
      return FALSE;
    case GST_EVENT_EOS:
      GST_DEBUG_OBJECT(self, "EOS requested: ending the clip");
      self->priv->eos_requested = true;
      self->priv->generation.end();
      gst_event_unref(event);
      return TRUE;
    default: return GST_ELEMENT_CLASS(parent_class)->send_event(element, event);
  }
}

static gboolean gst_h3_src_pad_event(GstPad* pad, GstObject* parent, GstEvent* event) {
  switch (GST_EVENT_TYPE(event)) {
    case GST_EVENT_SEEK:
      GST_DEBUG_OBJECT(parent, "refusing a seek on %s: a generated clip is not seekable", GST_PAD_NAME(pad));
      gst_event_unref(event);
      return FALSE;
    case GST_EVENT_RECONFIGURE:
      // The caps are fixed by the plan: nothing to renegotiate.
      gst_event_unref(event);
      return TRUE;
    default: return gst_pad_event_default(pad, parent, event);
  }
}

static gboolean gst_h3_src_pad_query(GstPad* pad, GstObject* parent, GstQuery* query) {
  GstH3Src* self = GST_H3_SRC(parent);
  H3SrcPrivate* p = self->priv;
  const bool video = pad == p->video_pad;
  switch (GST_QUERY_TYPE(query)) {
    case GST_QUERY_CAPS: {
      GstCaps* filter = nullptr;
      gst_query_parse_caps(query, &filter);
      GstCaps* caps = gst_pad_get_current_caps(pad);
      if (!caps) {
        caps = gst_pad_get_pad_template_caps(pad);
        const Published pub = published(self);
        if (video && pub.have_plan) caps = h3src::planned_video_caps(caps, pub.plan, pub.fps_n, pub.fps_d);
      }
      if (filter) {
        GstCaps* tmp = gst_caps_intersect_full(filter, caps, GST_CAPS_INTERSECT_FIRST);
        gst_caps_unref(caps);
        caps = tmp;
      }
      gst_query_set_caps_result(query, caps);
      gst_caps_unref(caps);
      return TRUE;
    }
    case GST_QUERY_DURATION: {
      GstFormat format;
      gst_query_parse_duration(query, &format, nullptr);
      const Published pub = published(self);
      if (format != GST_FORMAT_TIME || !pub.have_plan) return FALSE;
      const GstClockTime d =
          video ? h3src::frame_time(pub.plan.num_frames, pub.fps_n, pub.fps_d)
                : gst_util_uint64_scale(static_cast<guint64>(pub.plan.audio_samples), GST_SECOND, kAudioRate);
      gst_query_set_duration(query, GST_FORMAT_TIME, static_cast<gint64>(d));
      return TRUE;
    }
    case GST_QUERY_SEEKING: {
      GstFormat format;
      gst_query_parse_seeking(query, &format, nullptr, nullptr, nullptr);
      gst_query_set_seeking(query, format, FALSE, 0, -1);
      return TRUE;
    }
    case GST_QUERY_LATENCY: gst_query_set_latency(query, FALSE, 0, GST_CLOCK_TIME_NONE); return TRUE;
    default: return gst_pad_query_default(pad, parent, query);
  }
}

// ---------------------------------------------------------------------------
// Streaming: one task per pad
// ---------------------------------------------------------------------------

// The generation failed: both pads learn it; the first posts it.
static void report_failure(GstH3Src* self, const h3gst::Failure& failure) {
  if (!self->priv->failure_posted.exchange(true))
    h3src::post_failure(GST_ELEMENT(self), failure, "Generation failed");
}

// stream-start (one group for both pads), the negotiated caps, a TIME segment from 0 (so that
// both pads' timestamps are on the same running time) and the clip's tags.
static bool begin_stream(GstH3Src* self, GstPad* pad, GstCaps* caps) {
  gchar* stream_id = gst_pad_create_stream_id(pad, GST_ELEMENT(self), GST_PAD_NAME(pad));
  GstEvent* ss = gst_event_new_stream_start(stream_id);
  g_free(stream_id);
  gst_event_set_group_id(ss, self->priv->group_id);
  gst_pad_push_event(pad, ss);
  const bool ok = gst_pad_set_caps(pad, caps);
  if (!ok) return false;
  GstSegment segment;
  gst_segment_init(&segment, GST_FORMAT_TIME);
  gst_pad_push_event(pad, gst_event_new_segment(&segment));
  gst_pad_push_event(pad, gst_event_new_tag(h3src::stream_tags(self->priv->active)));
  return true;
}

// Downstream's caps for `pad` among `offered` (taken), fixated by `fixate`; nullptr (and an
// error posted) when there are none.
template <typename Fixate>
static GstCaps* negotiate(GstH3Src* self, GstPad* pad, GstCaps* offered, Fixate fixate) {
  GstCaps* peer = gst_pad_peer_query_caps(pad, offered);
  GstCaps* caps = gst_caps_intersect_full(peer, offered, GST_CAPS_INTERSECT_FIRST);
  gst_caps_unref(peer);
  gst_caps_unref(offered);
  if (gst_caps_is_empty(caps)) {
    gst_caps_unref(caps);
    GST_ELEMENT_ERROR(self, STREAM, FORMAT,
                      ("Downstream of the %s pad accepts none of its formats", GST_PAD_NAME(pad)), (nullptr));
    return nullptr;
  }
  caps = gst_caps_truncate(gst_caps_make_writable(caps));
  fixate(caps);
  return gst_caps_fixate(caps);
}

static bool configure_video(GstH3Src* self, const Published& pub) {
  H3SrcPrivate* p = self->priv;
  GstPad* pad = p->video_pad;
  GstCaps* caps =
      negotiate(self, pad,
                h3src::planned_video_caps(gst_pad_get_pad_template_caps(pad), pub.plan, pub.fps_n, pub.fps_d),
                [&](GstCaps* c) { h3src::fixate_video_caps(c, pub.plan, pub.fps_n, pub.fps_d); });
  if (!caps) return false;
  GstVideoInfo info;
  const bool ok =
      gst_video_info_from_caps(&info, caps) && p->writer.configure(info) && begin_stream(self, pad, caps);
  // A flush that arrived since the task took its first frame makes the pad refuse the caps:
  // not an error, the task pauses and configures again after flush-stop.
  if (!ok && !GST_PAD_IS_FLUSHING(pad)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Could not negotiate the video pad's format"),
                      ("caps %" GST_PTR_FORMAT, static_cast<void*>(caps)));
  }
  gst_caps_unref(caps);
  return ok;
}

static bool configure_audio(GstH3Src* self) {
  H3SrcPrivate* p = self->priv;
  GstPad* pad = p->audio_pad;
  GstCaps* caps = negotiate(self, pad, gst_pad_get_pad_template_caps(pad), [](GstCaps* c) {
    // The engine's samples are f32: prefer them over a conversion to S16LE.
    gst_structure_fixate_field_string(gst_caps_get_structure(c, 0), "format", "F32LE");
  });
  if (!caps) return false;
  GstAudioInfo info;
  const bool ok = gst_audio_info_from_caps(&info, caps) && GST_AUDIO_INFO_RATE(&info) == kAudioRate &&
                  GST_AUDIO_INFO_CHANNELS(&info) == kAudioChannels && begin_stream(self, pad, caps);
  if (ok)
    p->s16 = GST_AUDIO_INFO_FORMAT(&info) == GST_AUDIO_FORMAT_S16LE;
  else if (!GST_PAD_IS_FLUSHING(pad))  // a flush since the first samples: see configure_video
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Could not negotiate the audio pad's format"),
                      ("caps %" GST_PTR_FORMAT, static_cast<void*>(caps)));
  gst_caps_unref(caps);
  return ok;
}

// After a flush: the segment again (the flush removed it), the clip starting over at 0.
static void resend_segment(GstPad* pad, PadStream& stream) {
  if (!stream.need_segment) return;
  stream.need_segment = false;
  GstSegment segment;
  gst_segment_init(&segment, GST_FORMAT_TIME);
  gst_pad_push_event(pad, gst_event_new_segment(&segment));
}

// Pushes `buf` on `pad`, returning whether the task goes on. A downstream that is done
// (EOS) or not linked is not an error: the task keeps draining its queue, so that the engine,
// and with it the other pad, is never held back by a pad nobody reads.
static bool push(GstH3Src* self, GstPad* pad, PadStream& stream, GstBuffer* buf) {
  if (stream.downstream_done) {
    gst_buffer_unref(buf);
    return true;
  }
  resend_segment(pad, stream);
  const GstFlowReturn r = gst_pad_push(pad, buf);
  switch (r) {
    case GST_FLOW_OK: return true;
    case GST_FLOW_NOT_LINKED: return true;
    case GST_FLOW_EOS:
      GST_DEBUG_OBJECT(self, "%s: downstream is done; draining", GST_PAD_NAME(pad));
      stream.downstream_done = true;
      return true;
    case GST_FLOW_FLUSHING:
      GST_DEBUG_OBJECT(self, "%s: flushing", GST_PAD_NAME(pad));
      gst_pad_pause_task(pad);
      return false;
    default:
      GST_ELEMENT_FLOW_ERROR(self, r);
      gst_pad_push_event(pad, gst_event_new_eos());
      gst_pad_pause_task(pad);
      return false;
  }
}

// The queue ended: EOS when every frame (or sample) of the plan went out, else an error.
static void end_stream(GstH3Src* self, GstPad* pad, int64_t delivered, int64_t planned, const char* unit) {
  gst_pad_pause_task(pad);
  if (delivered != planned) {
    GST_ELEMENT_ERROR(self, STREAM, FAILED,
                      ("The engine ended the clip after %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT " %s",
                       delivered, planned, unit),
                      (nullptr));
    return;
  }
  GST_DEBUG_OBJECT(self, "%s: EOS after %" G_GINT64_FORMAT " %s", GST_PAD_NAME(pad), delivered, unit);
  gst_pad_push_event(pad, gst_event_new_eos());
}

// The queue woke the task without data: a state change or failed start (pause), or an EOS
// sent to the element (push EOS, then pause).
static void pause_or_end(GstH3Src* self, GstPad* pad) {
  gst_pad_pause_task(pad);
  if (self->priv->eos_requested) gst_pad_push_event(pad, gst_event_new_eos());
}

static void gst_h3_src_video_loop(gpointer data) {
  GstH3Src* self = GST_H3_SRC(data);
  H3SrcPrivate* p = self->priv;
  GstPad* pad = p->video_pad;
  h3src::Frame f;
  h3gst::Failure failure;
  switch (p->generation.pop(&f, &failure)) {
    case h3src::FrameQueue::PopResult::kFrame: break;
    case h3src::FrameQueue::PopResult::kFlushing: pause_or_end(self, pad); return;
    case h3src::FrameQueue::PopResult::kEnd:
      end_stream(self, pad, p->video.next, published(self).plan.num_frames, "frames");
      return;
    case h3src::FrameQueue::PopResult::kError:
      report_failure(self, failure);
      gst_pad_pause_task(pad);
      return;
  }
  const Published pub = published(self);  // the plan is out before any chunk is
  if (!p->video.configured) {
    if (!configure_video(self, pub)) {
      gst_pad_pause_task(pad);
      return;
    }
    p->video.configured = true;
  }
  const int64_t n = p->video.next;
  if (f.index != n || f.width != pub.plan.width || f.height != pub.plan.height) {
    GST_ELEMENT_ERROR(
        self, STREAM, FAILED, ("The engine delivered an unexpected frame"),
        ("frame %" G_GINT64_FORMAT " (%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "), expected %" G_GINT64_FORMAT,
         f.index, f.width, f.height, n));
    gst_pad_pause_task(pad);
    return;
  }
  GstBuffer* buf = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&p->writer.info()), nullptr);
  if (!p->writer.write(f, buf)) {
    gst_buffer_unref(buf);
    GST_ELEMENT_ERROR(self, RESOURCE, FAILED, ("Could not write a frame into the output buffer"), (nullptr));
    gst_pad_pause_task(pad);
    return;
  }
  GST_BUFFER_PTS(buf) = h3src::frame_time(n, pub.fps_n, pub.fps_d);
  GST_BUFFER_DURATION(buf) = h3src::frame_time(n + 1, pub.fps_n, pub.fps_d) - GST_BUFFER_PTS(buf);
  GST_BUFFER_OFFSET(buf) = static_cast<guint64>(n);
  GST_BUFFER_OFFSET_END(buf) = static_cast<guint64>(n + 1);
  if (n == 0) GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_DISCONT);
  p->video.next = n + 1;
  GST_LOG_OBJECT(self, "frame %" G_GINT64_FORMAT " pts %" GST_TIME_FORMAT, n,
                 GST_TIME_ARGS(GST_BUFFER_PTS(buf)));
  push(self, pad, p->video, buf);
}

// Interleaved f32 samples as S16LE, clamped and rounded to nearest.
static void write_s16(const float* in, int64_t n, int16_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::clamp(in[i], -1.0f, 1.0f) * 32767.0f;
    out[i] = static_cast<int16_t>(std::lrintf(v));
  }
}

static void gst_h3_src_audio_loop(gpointer data) {
  GstH3Src* self = GST_H3_SRC(data);
  H3SrcPrivate* p = self->priv;
  GstPad* pad = p->audio_pad;
  h3src::AudioSlice a;
  h3gst::Failure failure;
  switch (p->generation.pop_audio(&a, kAudioBufferSamples, &failure)) {
    case h3src::AudioQueue::PopResult::kSamples: break;
    case h3src::AudioQueue::PopResult::kFlushing: pause_or_end(self, pad); return;
    case h3src::AudioQueue::PopResult::kEnd:
      end_stream(self, pad, p->audio.next, published(self).plan.audio_samples, "audio samples");
      return;
    case h3src::AudioQueue::PopResult::kError:
      report_failure(self, failure);
      gst_pad_pause_task(pad);
      return;
  }
  if (!p->audio.configured) {
    if (!configure_audio(self)) {
      gst_pad_pause_task(pad);
      return;
    }
    p->audio.configured = true;
  }
  const int64_t first = p->audio.next;
  if (a.first_sample != first || a.channels != kAudioChannels) {
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("The engine delivered unexpected audio"),
                      ("%d-channel samples from %" G_GINT64_FORMAT ", expected 2 from %" G_GINT64_FORMAT,
                       a.channels, a.first_sample, first));
    gst_pad_pause_task(pad);
    return;
  }
  const int64_t values = a.count * kAudioChannels;
  GstBuffer* buf = gst_buffer_new_allocate(
      nullptr, static_cast<gsize>(values) * (p->s16 ? sizeof(int16_t) : sizeof(float)), nullptr);
  GstMapInfo map;
  if (!gst_buffer_map(buf, &map, GST_MAP_WRITE)) {
    gst_buffer_unref(buf);
    GST_ELEMENT_ERROR(self, RESOURCE, FAILED, ("Could not map an audio buffer"), (nullptr));
    gst_pad_pause_task(pad);
    return;
  }
  if (p->s16)
    write_s16(a.data, values, reinterpret_cast<int16_t*>(map.data));
  else
    std::memcpy(map.data, a.data, static_cast<size_t>(values) * sizeof(float));  // F32LE: the engine's own
  gst_buffer_unmap(buf, &map);
  // Timestamps from sample counts, so that they never drift from the sample clock.
  const auto at = [](int64_t s) {
    return gst_util_uint64_scale(static_cast<guint64>(s), GST_SECOND, kAudioRate);
  };
  GST_BUFFER_PTS(buf) = at(first);
  GST_BUFFER_DURATION(buf) = at(first + a.count) - at(first);
  GST_BUFFER_OFFSET(buf) = static_cast<guint64>(first);
  GST_BUFFER_OFFSET_END(buf) = static_cast<guint64>(first + a.count);
  if (first == 0) GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_DISCONT);
  p->audio.next = first + a.count;
  GST_LOG_OBJECT(self, "%" G_GINT64_FORMAT " samples from %" G_GINT64_FORMAT, a.count, first);
  push(self, pad, p->audio, buf);
}

// ---------------------------------------------------------------------------
// The generation's worker
// ---------------------------------------------------------------------------

namespace {

// The pads' tasks read the plan once the first chunk is out, which comes after this.
void SrcObserver::complete_start(const h3::ClipPlan* plan) {
  if (!plan) return;  // the failure was posted; the generation wakes the tasks
  H3SrcPrivate* p = self_->priv;
  GST_OBJECT_LOCK(self_);
  p->pub.plan = *plan;
  p->pub.have_plan = true;
  if (p->active.fps_n <= 0) {
    p->pub.fps_n = plan->fps_n;
    p->pub.fps_d = plan->fps_d;
  }
  GST_OBJECT_UNLOCK(self_);
}

}  // namespace
