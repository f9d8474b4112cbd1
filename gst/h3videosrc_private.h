// h3videosrc's instance state, shared by the element (gsth3videosrc.cpp: the
// GObject, properties and GstBaseSrc side) and its worker (h3videosrc_run.cpp:
// the engine side, on threads of its own). Not installed.
#pragma once

#include <gst/video/video.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine_module.h"
#include "frame_queue.h"
#include "gsth3videosrc.h"

GST_DEBUG_CATEGORY_EXTERN(gst_h3_video_src_debug);

#define DEFAULT_PROMPT "a paper boat drifting on a calm lake at sunset"
#define DEFAULT_SEED 0
#define DEFAULT_STEPS -1
#define DEFAULT_SIZE -1
#define DEFAULT_NUM_FRAMES -1
#define DEFAULT_RANKS 1
#define DEFAULT_TP_SIZE 0
#define DEFAULT_DEVICE "cpu"
#define DEFAULT_QUEUE_CHUNKS 2
#define DEFAULT_IS_LIVE FALSE
#define DEFAULT_TIMEOUT 120

namespace h3src {

// Property values. The element copies them once, in start(); the streaming and
// engine threads only ever see that copy.
struct Settings {
  std::string model;
  std::string prompt = DEFAULT_PROMPT;
  std::string embeds;
  guint64 seed = DEFAULT_SEED;
  gint steps = DEFAULT_STEPS;
  gint width = DEFAULT_SIZE, height = DEFAULT_SIZE;
  gint num_frames = DEFAULT_NUM_FRAMES;
  gint fps_n = 0, fps_d = 1;  // 0/1: the model's rate
  gint ranks = DEFAULT_RANKS, tp = DEFAULT_TP_SIZE;
  std::string device = DEFAULT_DEVICE;
  gint queue_chunks = DEFAULT_QUEUE_CHUNKS;
  gboolean live = DEFAULT_IS_LIVE;
  guint timeout_s = DEFAULT_TIMEOUT;
};

}  // namespace h3src

/* *INDENT-OFF* */
struct H3VideoSrcPrivate {
  // Guards `props` (any thread) and `started`.
  std::mutex prop_lock;
  h3src::Settings props;
  bool started = false;

  // Copied in start(); read-only while started.
  h3src::Settings active;
  std::string plugin_dir;

  // The engine stays open across PAUSED -> READY -> PAUSED when its settings do
  // not change, and is released in READY -> NULL.
  std::unique_ptr<h3gst::EngineHandle> engine;
  h3gst::EngineSettings engine_settings;

  // Guards the hand-over between the worker thread and stop()/flushes: the
  // worker completes the async start and begins generating only while
  // `stopping` is false, and stop() cancels the engine only while `generating`.
  std::mutex run_lock;
  bool stopping = false;
  bool generating = false;
  std::thread worker;

  h3gst::FrameQueue queue{DEFAULT_QUEUE_CHUNKS};
  std::atomic<bool> restart_pending{false};

  // Known once the async start has planned the request (guarded by GST_OBJECT_LOCK).
  bool have_plan = false;
  h3gst::ClipInfo plan;
  gint fps_n = 24, fps_d = 1;

  // Streaming thread only.
  GstVideoInfo info;
  GstVideoInfo src_info;
  GstVideoConverter* converter = nullptr;
  int64_t frame_n = 0;
  h3gst::Frame pending;  // popped, but the buffer allocation was interrupted
  bool have_pending = false;
  bool tags_sent = false;
  // Live: the running time the first frame was taken at, and whether the
  // "slower than real time" warning went out already.
  GstClockTime first_running = GST_CLOCK_TIME_NONE;
  bool warned_late = false;

  // Live latency: the slowest chunk's decode time seen so far (GST_OBJECT_LOCK).
  GstClockTime chunk_time = GST_CLOCK_TIME_NONE;
  GstClockTime reported_latency = GST_CLOCK_TIME_NONE;
};
/* *INDENT-ON* */

struct _GstH3VideoSrc {
  GstPushSrc parent;
  H3VideoSrcPrivate* priv;
};

namespace h3src {

// Posts an engine failure as an element error whose domain and code tell an
// application what kind of fix is needed; `what` says what was being done.
void post_failure(GstH3VideoSrc* self, const h3gst::Failure& f, const char* what);
// GstProgress `open`; `percent` >= 0 is written into the message.
void post_progress(GstH3VideoSrc* self, GstProgressType type, const gchar* text, gint percent = -1);

// Starts the worker thread: it loads the engine module, opens the engine (or
// reuses the open one), plans the request, completes the async start and then
// generates, feeding the frame queue.
void start_worker(GstH3VideoSrc* self);
// Cancels a running request (the engine stops at its next step or chunk
// boundary, agreed across ranks) and joins the worker.
void cancel_and_join(GstH3VideoSrc* self);
// A flush: cancels the request; the next create() generates the clip again.
void handle_flush_start(GstH3VideoSrc* self);
// From create(), after a flush: joins the cancelled worker, starts a new request.
void restart_generation(GstH3VideoSrc* self);

}  // namespace h3src
