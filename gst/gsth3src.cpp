/**
 * SECTION:element-h3src
 * @title: h3src
 *
 * Generates a clip with its soundtrack from a text prompt (or precomputed prompt
 * embeddings) with the MiniMax-H3 model: raw video on the `video` pad, raw stereo
 * audio at the model's rate (32 kHz for the release) on the `audio` pad. The engine
 * hands each decoded video chunk over the moment it exists, then the stretch of the
 * soundtrack that goes with it; each pad pushes from a bounded queue of its own on a
 * task of its own, so a pad whose downstream is slow holds back the engine (memory
 * stays bounded) but never the other pad's queued data. Both pads start at running
 * time 0 and end with EOS.
 *
 * Properties are h3videosrc's. With is-live=true it is a live source, as h3videosrc: both pads
 * push in PLAYING only, paced to the clock.
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

#include <atomic>

#include "audio_writer.h"
#include "caps.h"
#include "frame_writer.h"
#include "lifecycle.h"
#include "live_timing.h"
#include "prompt_pad.h"
#include "queries.h"
#include "src_pad.h"
#include "tags.h"

GST_DEBUG_CATEGORY_STATIC(gst_h3_src_debug);
#define GST_CAT_DEFAULT gst_h3_src_debug

// Sample frames per audio buffer: 32 ms at the release's 32 kHz, about what audio sources push, so that
// downstream queues measured in buffers or time hold a sensible amount.
static constexpr int64_t kAudioBufferSamples = 1024;

static GstStaticPadTemplate video_template =
    GST_STATIC_PAD_TEMPLATE("video", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS(H3_VIDEO_CAPS));
static GstStaticPadTemplate audio_template =
    GST_STATIC_PAD_TEMPLATE("audio", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS(H3_AUDIO_CAPS));
// The stream's prompt as timed text (prompt_pad.h): mp4mux's subtitle pad writes it as tx3g.
static GstStaticPadTemplate prompts_template = GST_STATIC_PAD_TEMPLATE(
    "prompts", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS("text/x-raw, format=utf8"));

// h3src's instance state. Threads: the application's (properties, state changes, events), the
// generation's worker (engine; fills both queues), the video pad's task and the audio pad's task
// (each pops its own queue and pushes downstream). Locks: docs/element.md, "Locks". A pad's task
// blocks only in its own queue's pop() or its own gst_pad_push(); the worker blocks only in a
// queue's push() (generation.h says why that cannot deadlock a muxer).
struct H3SrcPrivate {
  explicit H3SrcPrivate(GstH3Src* self);

  h3gst::Lifecycle lifecycle;
  // is-live=true (docs/causal.md "Live"): the pads push in PLAYING only, paced to this clock
  // (src_pad.h). `live` is this start's is-live, written by state changes while no task runs.
  h3gst::LiveClock live_clock;
  bool live = false;

  h3gst::SrcPad video, audio;
  h3gst::PromptPad prompts;  // pushed by the video pad's task
  guint group_id = 0;        // the pads' streams are one group
  // The pads' tasks were started (READY -> PAUSED) and not stopped yet: a flush-stop starts
  // them again. Written by state changes, read by flush-stop.
  std::atomic<bool> started_tasks{false};

  h3gst::FrameWriter writer;        // the video pad's task only
  h3gst::AudioWriter audio_writer;  // the audio pad's task only
};

struct _GstH3Src {
  GstElement parent;
  H3SrcPrivate* priv;
};

#define gst_h3_src_parent_class parent_class
G_DEFINE_TYPE(GstH3Src, gst_h3_src, GST_TYPE_ELEMENT);
GST_ELEMENT_REGISTER_DEFINE(h3src, "h3src", GST_RANK_NONE, GST_TYPE_H3_SRC);

static GstStateChangeReturn gst_h3_src_change_state(GstElement* element, GstStateChange transition);
static gboolean gst_h3_src_send_event(GstElement* element, GstEvent* event);
static gboolean gst_h3_src_pad_query(GstPad* pad, GstObject* parent, GstQuery* query);
static gboolean gst_h3_src_pad_event(GstPad* pad, GstObject* parent, GstEvent* event);
static void gst_h3_src_video_loop(gpointer data);
static void gst_h3_src_audio_loop(gpointer data);

static void gst_h3_src_finalize(GObject* object) {
  GstH3Src* self = GST_H3_SRC(object);
  delete self->priv;  // the generation joins its worker (stop did already) and releases the engine
  self->priv = nullptr;
  G_OBJECT_CLASS(parent_class)->finalize(object);
}

// ---- Properties (settings.h, under the object lock in the lifecycle) ----

static void gst_h3_src_set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec) {
  if (!GST_H3_SRC(object)->priv->lifecycle.set_property(prop_id, value, pspec))
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
}

static void gst_h3_src_get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  if (!GST_H3_SRC(object)->priv->lifecycle.get_property(prop_id, value))
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
}

// An "h3.engine" context: the engine this element uses at its next start when its options agree
// (shared_engine.h).
static void gst_h3_src_set_context(GstElement* element, GstContext* context) {
  GST_H3_SRC(element)->priv->lifecycle.set_context(context);
  GST_ELEMENT_CLASS(parent_class)->set_context(element, context);
}

static void gst_h3_src_class_init(GstH3SrcClass* klass) {
  GObjectClass* gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);

  GST_DEBUG_CATEGORY_INIT(gst_h3_src_debug, "h3src", 0, "H3 video and audio generator source");

  gobject_class->finalize = gst_h3_src_finalize;
  gobject_class->set_property = gst_h3_src_set_property;
  gobject_class->get_property = gst_h3_src_get_property;
  h3gst::install_properties(gobject_class);

  gst_element_class_set_static_metadata(
      element_class, "H3 video and audio generator", "Source/Audio/Video",
      "Generates video with its soundtrack from a text prompt with the MiniMax-H3 diffusion model, "
      "pushing each decoded chunk's frames and audio as they are produced",
      "gst-h3 developers");
  gst_element_class_add_static_pad_template(element_class, &video_template);
  gst_element_class_add_static_pad_template(element_class, &audio_template);
  gst_element_class_add_static_pad_template(element_class, &prompts_template);
  h3gst::register_tags();

  element_class->change_state = GST_DEBUG_FUNCPTR(gst_h3_src_change_state);
  element_class->send_event = GST_DEBUG_FUNCPTR(gst_h3_src_send_event);
  element_class->set_context = GST_DEBUG_FUNCPTR(gst_h3_src_set_context);
}

static GstPad* make_pad(GstH3Src* self, GstStaticPadTemplate* templ) {
  GstPad* pad = gst_pad_new_from_static_template(templ, templ->name_template);
  gst_pad_set_query_function(pad, GST_DEBUG_FUNCPTR(gst_h3_src_pad_query));
  gst_pad_set_event_function(pad, GST_DEBUG_FUNCPTR(gst_h3_src_pad_event));
  gst_pad_use_fixed_caps(pad);
  gst_element_add_pad(GST_ELEMENT(self), pad);
  return pad;
}

// The pads' tasks read the plan once the first chunk is out, which comes after this. The video
// pad reports each frame as it goes (a prompt change is applied from its chunk's first frame).
// The segment is TIME from 0: a buffer's running time is its PTS (the live anchor included).
H3SrcPrivate::H3SrcPrivate(GstH3Src* self)
    : lifecycle(GST_ELEMENT(self), gst_h3_src_debug,
                [this](const h3::ClipPlan* plan) {
                  if (plan) lifecycle.publish_plan(*plan);
                }),
      video(GST_ELEMENT(self), make_pad(self, &video_template), gst_h3_src_debug, live_clock, 0,
            [this](GstBuffer* buf) {
              // A chunk's first frame is followed by the chunk's prompt on the `prompts` pad.
              lifecycle.frame_pushed(static_cast<int64_t>(GST_BUFFER_OFFSET(buf)), GST_BUFFER_PTS(buf));
              prompts.follow_video(buf, lifecycle, group_id);
            }),
      audio(GST_ELEMENT(self), make_pad(self, &audio_template), gst_h3_src_debug, live_clock, 1),
      prompts(GST_ELEMENT(self), make_pad(self, &prompts_template), gst_h3_src_debug) {}

static void gst_h3_src_init(GstH3Src* self) {
  self->priv = new H3SrcPrivate(self);
  GST_OBJECT_FLAG_SET(self, GST_ELEMENT_FLAG_SOURCE);
}

// ---- States ----

// PAUSED -> READY, before the pads are deactivated: wakes both tasks (a task blocked in its
// queue returns at once; one blocked downstream is released by downstream, which changed state
// before this element) and joins them.
static void stop_tasks(GstH3Src* self) {
  H3SrcPrivate* p = self->priv;
  p->started_tasks = false;
  p->lifecycle.set_flushing(true);
  p->live_clock.stop();
  p->video.stop_task();
  p->audio.stop_task();
}

static void start_tasks(GstH3Src* self) {
  H3SrcPrivate* p = self->priv;
  p->started_tasks = true;
  p->video.start_task(gst_h3_src_video_loop, self);
  p->audio.start_task(gst_h3_src_audio_loop, self);
}

// Idempotent: after the tasks stopped, or after a start that failed.
static void stop_running(GstH3Src* self) {
  H3SrcPrivate* p = self->priv;
  p->lifecycle.stop();
  p->writer.reset();
  p->video.release_pool();
  p->audio.release_pool();
}

static GstStateChangeReturn gst_h3_src_change_state(GstElement* element, GstStateChange transition) {
  GstH3Src* self = GST_H3_SRC(element);
  H3SrcPrivate* p = self->priv;
  switch (transition) {
    case GST_STATE_CHANGE_READY_TO_PAUSED:
      p->live = p->lifecycle.live_property();
      p->video.reset(p->live);
      p->audio.reset(p->live);
      p->prompts.reset();
      p->group_id = gst_util_group_id_next();
      p->live_clock.reset();
      if (!p->lifecycle.start(/*audio=*/true)) {
        stop_running(self);
        return GST_STATE_CHANGE_FAILURE;
      }
      break;
    case GST_STATE_CHANGE_PLAYING_TO_PAUSED: p->live_clock.set_playing(false); break;
    case GST_STATE_CHANGE_PAUSED_TO_READY: stop_tasks(self); break;
    default: break;
  }
  GstStateChangeReturn ret = GST_ELEMENT_CLASS(parent_class)->change_state(element, transition);
  switch (transition) {
    case GST_STATE_CHANGE_READY_TO_PAUSED:
      if (ret == GST_STATE_CHANGE_FAILURE) {
        stop_running(self);
        break;
      }
      // The pads are active now: their tasks start, and wait for the engine's first chunk (a
      // live source's push in PLAYING only, and it does not preroll).
      start_tasks(self);
      if (p->live) ret = GST_STATE_CHANGE_NO_PREROLL;
      break;
    case GST_STATE_CHANGE_PAUSED_TO_PLAYING:
      if (ret != GST_STATE_CHANGE_FAILURE) p->live_clock.set_playing(true);
      break;
    case GST_STATE_CHANGE_PLAYING_TO_PAUSED:
      if (p->live && ret != GST_STATE_CHANGE_FAILURE) ret = GST_STATE_CHANGE_NO_PREROLL;
      break;
    case GST_STATE_CHANGE_PAUSED_TO_READY: stop_running(self); break;
    case GST_STATE_CHANGE_READY_TO_NULL: p->lifecycle.close_engine(); break;
    default: break;
  }
  return ret;
}

// ---- Events and queries ----

// A flush throws away what was generated, as with h3videosrc: flush-start cancels the request
// and wakes both tasks (blocked in their queues, or downstream, which the flush-start reaches);
// flush-stop waits for both to pause (their stream locks), generates the clip again from its
// first frame and starts them again.
static void flush_start(GstH3Src* self, GstEvent* event) {
  H3SrcPrivate* p = self->priv;
  p->lifecycle.flush_start();
  p->lifecycle.set_flushing(true);
  p->live_clock.stop();
  gst_pad_push_event(p->video.pad(), gst_event_ref(event));
  gst_pad_push_event(p->prompts.pad(), gst_event_ref(event));
  gst_pad_push_event(p->audio.pad(), event);
}

static void flush_stop(GstH3Src* self, GstEvent* event) {
  H3SrcPrivate* p = self->priv;
  GST_PAD_STREAM_LOCK(p->video.pad());
  GST_PAD_STREAM_LOCK(p->audio.pad());
  gst_pad_push_event(p->video.pad(), gst_event_ref(event));
  gst_pad_push_event(p->prompts.pad(), gst_event_ref(event));
  gst_pad_push_event(p->audio.pad(), event);
  p->lifecycle.set_flushing(false);
  const bool restarted = p->lifecycle.restart_if_flushed();
  p->video.flush_stop(restarted);
  p->prompts.flush_stop(restarted);
  p->audio.flush_stop(restarted);
  p->live_clock.reset(GST_STATE(self) == GST_STATE_PLAYING);
  const bool running = p->started_tasks;
  GST_PAD_STREAM_UNLOCK(p->audio.pad());
  GST_PAD_STREAM_UNLOCK(p->video.pad());
  if (running) start_tasks(self);
}

// Seeks are refused (Lifecycle::refuses_seek). An EOS sent to the element (gst-launch-1.0 -e)
// ends the clip early: the request is cancelled and both pads push EOS.
static gboolean gst_h3_src_send_event(GstElement* element, GstEvent* event) {
  GstH3Src* self = GST_H3_SRC(element);
  bool accepted = false;
  if (self->priv->lifecycle.prompt_event(event, &accepted) || self->priv->lifecycle.refuses_seek(event)) {
    gst_event_unref(event);
    return accepted;
  }
  switch (GST_EVENT_TYPE(event)) {
    case GST_EVENT_FLUSH_START: flush_start(self, event); return TRUE;
    case GST_EVENT_FLUSH_STOP: flush_stop(self, event); return TRUE;
    case GST_EVENT_EOS:
      self->priv->lifecycle.request_eos();
      gst_event_unref(event);
      return TRUE;
    default: return GST_ELEMENT_CLASS(parent_class)->send_event(element, event);
  }
}

static gboolean gst_h3_src_pad_event(GstPad* pad, GstObject* parent, GstEvent* event) {
  if (GST_H3_SRC(parent)->priv->lifecycle.refuses_seek(event)) {
    gst_event_unref(event);
    return FALSE;
  }
  // pace=steps: downstream's lateness feeds the policy (then the event goes on as before).
  if (GST_EVENT_TYPE(event) == GST_EVENT_QOS) GST_H3_SRC(parent)->priv->lifecycle.downstream_qos(event);
  // The caps are fixed by the plan: a RECONFIGURE has nothing to renegotiate.
  if (GST_EVENT_TYPE(event) != GST_EVENT_RECONFIGURE) return gst_pad_event_default(pad, parent, event);
  gst_event_unref(event);
  return TRUE;
}

static gboolean gst_h3_src_pad_query(GstPad* pad, GstObject* parent, GstQuery* query) {
  GstH3Src* self = GST_H3_SRC(parent);
  H3SrcPrivate* p = self->priv;
  // The prompts pad's text runs beside the video: its duration, seeking and latency are the video's.
  const bool video = pad != p->audio.pad();
  if (pad == p->prompts.pad() && GST_QUERY_TYPE(query) == GST_QUERY_CAPS)
    return p->prompts.answer_caps(query);
  switch (GST_QUERY_TYPE(query)) {
    case GST_QUERY_CONTEXT:
      if (p->lifecycle.answer_context_query(query)) return TRUE;
      return gst_pad_query_default(pad, parent, query);
    case GST_QUERY_CUSTOM: return p->lifecycle.answer_record_query(query);
    case GST_QUERY_CAPS: h3gst::answer_caps(pad, query, p->lifecycle.published(), video); return TRUE;
    case GST_QUERY_DURATION: return h3gst::answer_pad_duration(query, p->lifecycle.published(), video);
    case GST_QUERY_SEEKING: {
      GstFormat format;
      gst_query_parse_seeking(query, &format, nullptr, nullptr, nullptr);
      gst_query_set_seeking(query, format, FALSE, 0, -1);
      return TRUE;
    }
    case GST_QUERY_LATENCY:
      // Live, a chunk's buffers exist only once the chunk is made (live_latency); non-live, none.
      gst_query_set_latency(query, FALSE, 0, GST_CLOCK_TIME_NONE);
      if (p->live) h3gst::answer_live_latency(query, p->lifecycle.published());
      return TRUE;
    default: return gst_pad_query_default(pad, parent, query);
  }
}

// ---- Streaming: one task per pad ----

static bool configure_video(GstH3Src* self, const h3gst::Published& pub) {
  H3SrcPrivate* p = self->priv;
  GstCaps* offered = h3gst::planned_video_caps(gst_pad_get_pad_template_caps(p->video.pad()), pub.plan,
                                               pub.fps_n, pub.fps_d);
  GstCaps* caps = p->video.negotiate(
      offered, [&pub](GstCaps* c) { h3gst::fixate_video_caps(c, pub.plan, pub.fps_n, pub.fps_d); });
  if (!caps) return false;
  GstVideoInfo info;
  const bool ok = gst_video_info_from_caps(&info, caps) && p->writer.configure(info) &&
                  p->video.begin(caps, p->group_id, h3gst::stream_tags(p->lifecycle.record().get()),
                                 static_cast<guint>(GST_VIDEO_INFO_SIZE(&info)), /*video=*/true);
  gst_caps_unref(caps);
  return ok;
}

static bool configure_audio(GstH3Src* self, const h3gst::Published& pub) {
  H3SrcPrivate* p = self->priv;
  GstCaps* caps =
      p->audio.negotiate(h3gst::planned_audio_caps(gst_pad_get_pad_template_caps(p->audio.pad()), pub.plan),
                         h3gst::fixate_audio_caps);
  if (!caps) return false;
  GstAudioInfo info;
  bool ok = gst_audio_info_from_caps(&info, caps) && p->audio_writer.configure(info, pub.plan.audio_rate);
  if (!ok) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Could not negotiate the audio pad's format"),
                      ("caps %" GST_PTR_FORMAT, static_cast<void*>(caps)));
  } else {
    ok = p->audio.begin(caps, p->group_id, h3gst::stream_tags(p->lifecycle.record().get()),
                        static_cast<guint>(p->audio_writer.bytes(kAudioBufferSamples)), /*video=*/false);
  }
  gst_caps_unref(caps);
  return ok;
}

// The queue gave no data: the pad ends with EOS or pauses (Lifecycle::stream_ends). A pad that
// ends before its first data still starts its stream (caps from the plan), so that a muxer gets a
// track it can describe: an application's EOS may come before the first chunk's audio.
static bool no_data(GstH3Src* self, h3gst::SrcPad& pad, h3gst::Lifecycle::Pop why,
                    const h3gst::Published& pub, int64_t planned, const char* unit,
                    bool (*configure)(GstH3Src*, const h3gst::Published&)) {
  const bool eos = self->priv->lifecycle.stream_ends(why, pad.next, planned, unit);
  if (eos && !pad.configured() && pub.have_plan) configure(self, pub);
  pad.end(eos);
  return eos;
}

static void gst_h3_src_video_loop(gpointer data) {
  GstH3Src* self = GST_H3_SRC(data);
  H3SrcPrivate* p = self->priv;
  h3gst::SrcPad& pad = p->video;
  if (pad.push_held()) return;
  h3gst::Published pub;
  h3gst::Frame f;
  const h3gst::Lifecycle::Pop got = p->lifecycle.pop_frame(&f, pad.next, &pub);
  if (got != h3gst::Lifecycle::Pop::kData)  // the prompt track ends with the video
    return p->prompts.end(no_data(self, pad, got, pub, pub.plan.num_frames, "frames", configure_video),
                          p->group_id);
  if (!pad.configured() && !configure_video(self, pub)) return pad.end(false);
  GstBuffer* buf = pad.acquire();
  if (!buf) return;
  if (!p->writer.write(f, buf, GST_ELEMENT(self))) {
    gst_buffer_unref(buf);
    return pad.end(false);
  }
  h3gst::Lifecycle::stamp_frame(buf, pad.next, pub.fps_n, pub.fps_d);
  GST_LOG_OBJECT(self, "frame %" G_GINT64_FORMAT " pts %" GST_TIME_FORMAT, pad.next,
                 GST_TIME_ARGS(GST_BUFFER_PTS(buf)));
  const int64_t n = pad.next++;
  GstClockTimeDiff late = 0;
  pad.push_paced(buf, f.chunk_start ? &pub : nullptr, n, &late);
  // pace=steps: a chunk's lateness steers its forwards per chunk (chunk 0 anchors the stream).
  if (f.chunk_start && n > 0) {
    p->lifecycle.chunk_paced(n / h3::dit::kChunkFrames, p->lifecycle.active().live
                                                            ? std::optional<GstClockTimeDiff>(late)
                                                            : std::nullopt);
  }
}

static void gst_h3_src_audio_loop(gpointer data) {
  GstH3Src* self = GST_H3_SRC(data);
  H3SrcPrivate* p = self->priv;
  h3gst::SrcPad& pad = p->audio;
  if (pad.push_held()) return;
  h3gst::Published pub;
  h3gst::AudioSlice a;
  const h3gst::Lifecycle::Pop got = p->lifecycle.pop_audio(&a, kAudioBufferSamples, pad.next, &pub);
  if (got != h3gst::Lifecycle::Pop::kData) {
    no_data(self, pad, got, pub, pub.plan.audio_samples, "audio samples", configure_audio);
    return;
  }
  if (!pad.configured() && !configure_audio(self, pub)) return pad.end(false);
  GstBuffer* buf = pad.acquire();
  if (!buf) return;
  if (!p->audio_writer.write(a, buf, GST_ELEMENT(self))) {
    gst_buffer_unref(buf);
    return pad.end(false);
  }
  h3gst::Lifecycle::stamp_samples(buf, pad.next, a.count, static_cast<gint>(pub.plan.audio_rate));
  GST_LOG_OBJECT(self, "%" G_GINT64_FORMAT " samples from %" G_GINT64_FORMAT, a.count, pad.next);
  pad.next += a.count;
  pad.push_paced(buf);
}
