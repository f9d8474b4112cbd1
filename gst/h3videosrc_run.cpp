// h3videosrc's engine side: the worker thread that opens the engine during the
// async start and then runs the request, the chunk sink that feeds the frame
// queue, cancellation, and the messages the engine's progress turns into.
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "engine_loader.h"
#include "h3videosrc_private.h"

#define GST_CAT_DEFAULT gst_h3_video_src_debug

namespace h3src {
namespace {

using Clock = std::chrono::steady_clock;

bool same_engine(const h3gst::EngineSettings& a, const h3gst::EngineSettings& b) {
  return a.model_dir == b.model_dir && a.ranks == b.ranks && a.tp == b.tp && a.device == b.device &&
         a.timeout_ms == b.timeout_ms;
}

}  // namespace

// Posts an engine failure with the domain and code that tell an application
// what kind of fix is needed. `what` says what was being done.
void post_failure(GstH3VideoSrc* self, const h3gst::Failure& f, const char* what) {
  const gchar* msg = f.message.c_str();
  switch (f.kind) {
    case h3gst::FailureKind::kNotFound:
      GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND, ("%s: %s", what, msg), ("engine error kind: not found"));
      break;
    case h3gst::FailureKind::kFormat:
    case h3gst::FailureKind::kMismatch:
      GST_ELEMENT_ERROR(self, RESOURCE, READ, ("%s: %s", what, msg),
                        ("engine error kind: %s", h3gst::to_string(f.kind)));
      break;
    case h3gst::FailureKind::kInvalidArgument:
      GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS, ("%s: %s", what, msg),
                        ("engine error kind: invalid argument"));
      break;
    case h3gst::FailureKind::kDistributed:
      GST_ELEMENT_ERROR(self, LIBRARY, FAILED, ("%s: %s", what, msg), ("engine error kind: distributed"));
      break;
    default:
      GST_ELEMENT_ERROR(self, STREAM, FAILED, ("%s: %s", what, msg),
                        ("engine error kind: %s", h3gst::to_string(f.kind)));
      break;
  }
}

void post_progress(GstH3VideoSrc* self, GstProgressType type, const gchar* text, gint percent) {
  GstMessage* m = gst_message_new_progress(GST_OBJECT(self), type, "open", text);
  if (percent >= 0) {
    gst_structure_set(gst_message_writable_structure(m), "percent", G_TYPE_INT, percent, nullptr);
  }
  gst_element_post_message(GST_ELEMENT(self), m);
}

static void post_h3_progress(GstH3VideoSrc* self, const h3gst::ProgressInfo& pr) {
  GstStructure* s = gst_structure_new(
      "h3-progress", "phase", G_TYPE_STRING, pr.phase.c_str(), "step", G_TYPE_INT, static_cast<gint>(pr.step),
      "total-steps", G_TYPE_INT, static_cast<gint>(pr.total_steps), "chunk", G_TYPE_INT,
      static_cast<gint>(pr.chunk), "total-chunks", G_TYPE_INT, static_cast<gint>(pr.total_chunks), "frames",
      G_TYPE_INT, static_cast<gint>(pr.frames), "total-frames", G_TYPE_INT,
      static_cast<gint>(pr.total_frames), "elapsed", G_TYPE_DOUBLE, pr.elapsed_s, nullptr);
  gst_element_post_message(GST_ELEMENT(self), gst_message_new_element(GST_OBJECT(self), s));
}

static h3gst::ClipRequest make_request(const Settings& s) {
  h3gst::ClipRequest r;
  // The embeddings file is the encoded prompt: the engine takes one or the other.
  r.prompt = s.embeds.empty() ? s.prompt : std::string();
  r.embeds_path = s.embeds;
  // The element's -1 is the engine's 0 ("the model's default"); an explicit 0
  // was refused in start().
  r.width = std::max(0, s.width);
  r.height = std::max(0, s.height);
  r.num_frames = std::max(0, s.num_frames);
  r.steps = std::max(0, s.steps);
  r.seed = s.seed;
  return r;
}

// Completes the async start unless a stop has begun; true when completed. On
// success `plan` is published in the same step.
//
// A live source's streaming task may already be running (PLAYING comes before
// the model is loaded): its create() returns FLUSHING until the plan is known,
// but once it sees the plan it blocks in the frame queue, holding the stream
// lock, while gst_base_src_start_complete() needs that lock and the frames come
// only after it returns. So the plan is published and the start completed
// while this thread holds the (recursive) stream lock: create() sees either no
// plan, or a plan with the start already complete.
static bool complete_start(GstH3VideoSrc* self, GstFlowReturn ret, const h3gst::ClipInfo* plan = nullptr,
                           gint fps_n = 0, gint fps_d = 1) {
  H3VideoSrcPrivate* p = self->priv;
  std::lock_guard<std::mutex> lock(p->run_lock);
  if (p->stopping) return false;
  GstPad* pad = GST_BASE_SRC_PAD(self);
  GST_PAD_STREAM_LOCK(pad);
  if (plan) {
    GST_OBJECT_LOCK(self);
    p->plan = *plan;
    p->have_plan = true;
    p->fps_n = fps_n;
    p->fps_d = fps_d;
    GST_OBJECT_UNLOCK(self);
  }
  gst_base_src_start_complete(GST_BASE_SRC(self), ret);
  GST_PAD_STREAM_UNLOCK(pad);
  return true;
}

static void note_chunk_time(GstH3VideoSrc* self, GstClockTime t) {
  H3VideoSrcPrivate* p = self->priv;
  bool post = false;
  GST_OBJECT_LOCK(self);
  if (!GST_CLOCK_TIME_IS_VALID(p->chunk_time) || t > p->chunk_time) p->chunk_time = t;
  // Like a re-measured processing deadline: tell the pipeline when the estimate
  // moved by more than a quarter.
  const GstClockTime est = p->chunk_time;
  if (p->active.live &&
      (!GST_CLOCK_TIME_IS_VALID(p->reported_latency) || est > p->reported_latency * 5 / 4)) {
    p->reported_latency = est;
    post = true;
  }
  GST_OBJECT_UNLOCK(self);
  if (post) gst_element_post_message(GST_ELEMENT(self), gst_message_new_latency(GST_OBJECT(self)));
}

// Runs the request; the queue ends with finish() or fail(), or was aborted.
static void run_generation(GstH3VideoSrc* self) {
  H3VideoSrcPrivate* p = self->priv;
  {
    std::lock_guard<std::mutex> lock(p->run_lock);
    if (p->stopping) return;
    p->engine->reset_cancel();
    p->generating = true;
  }
  const h3gst::ClipRequest req = make_request(p->active);
  // A chunk's decode time runs from the previous chunk's hand-over (or from the
  // start of decoding) to its own; denoising is not part of it.
  Clock::time_point last = Clock::now();
  bool timing = false;
  h3gst::ProgressInfo latest;
  auto on_progress = [&](const h3gst::ProgressInfo& pr) {
    if (!timing && pr.phase == "decoding") {
      timing = true;
      last = Clock::now();
    }
    latest = pr;
    post_h3_progress(self, pr);
  };
  auto on_chunk = [&](h3gst::FrameChunk&& chunk) {
    const auto now = Clock::now();
    if (timing) {
      note_chunk_time(self, static_cast<GstClockTime>(
                                std::chrono::duration_cast<std::chrono::nanoseconds>(now - last).count()));
    }
    timing = true;
    GST_LOG_OBJECT(self, "chunk %" G_GINT64_FORMAT ": %" G_GINT64_FORMAT " frames from %" G_GINT64_FORMAT,
                   chunk.index, chunk.count, chunk.first_frame);
    const bool ok = p->queue.push(std::move(chunk));
    last = Clock::now();  // time spent waiting for downstream is not decode time
    return ok;
  };
  h3gst::Failure f;
  const bool ok = p->engine->generate(req, on_chunk, on_progress, &f);
  {
    std::lock_guard<std::mutex> lock(p->run_lock);
    p->generating = false;
  }
  if (ok) {
    p->queue.finish();
    // Applications wait for phase=done to know decoding is over: make sure it comes.
    if (latest.phase != "done") {
      latest.phase = "done";
      post_h3_progress(self, latest);
    }
  } else if (f.kind == h3gst::FailureKind::kCancelled) {
    GST_DEBUG_OBJECT(self, "request cancelled");
    p->queue.abort();
  } else {
    GST_DEBUG_OBJECT(self, "request failed: %s", f.message.c_str());
    p->queue.fail(static_cast<int>(f.kind), f.message);
  }
}

static void fail_start(GstH3VideoSrc* self, const h3gst::Failure& f, const char* what) {
  post_failure(self, f, what);
  post_progress(self, GST_PROGRESS_TYPE_ERROR, what);
  complete_start(self, GST_FLOW_ERROR);
}

static void worker_main(GstH3VideoSrc* self) {
  H3VideoSrcPrivate* p = self->priv;
  const Settings& s = p->active;

  std::string error, module_path;
  const h3gst::EngineModule* mod = h3gst::load_engine_module(p->plugin_dir, &error, &module_path);
  if (!mod) {
    GST_ELEMENT_ERROR(self, LIBRARY, INIT, ("Could not load the H3 engine: %s", error.c_str()), (nullptr));
    post_progress(self, GST_PROGRESS_TYPE_ERROR, "could not load the H3 engine");
    complete_start(self, GST_FLOW_ERROR);
    return;
  }
  GST_DEBUG_OBJECT(self, "engine module %s", module_path.c_str());

  h3gst::EngineSettings es;
  es.model_dir = s.model.empty() ? mod->default_model_dir() : s.model;
  es.ranks = s.ranks;
  es.tp = s.tp;
  es.device = s.device;
  es.timeout_ms = static_cast<int64_t>(s.timeout_s) * 1000;

  if (!p->engine || !same_engine(es, p->engine_settings)) {
    p->engine.reset();
    gchar* text =
        g_strdup_printf("loading %s on %d %s rank(s)", es.model_dir.c_str(), es.ranks, es.device.c_str());
    post_progress(self, GST_PROGRESS_TYPE_CONTINUE, text, 0);
    g_free(text);
    h3gst::Failure f;
    auto on_load = [self](const h3gst::ProgressInfo& pr) { post_h3_progress(self, pr); };
    h3gst::EngineHandle* h = mod->open(es, on_load, &f);
    if (!h) {
      fail_start(self, f, "Could not open the H3 model");
      return;
    }
    p->engine.reset(h);
    p->engine_settings = es;
  }

  h3gst::ClipInfo plan;
  h3gst::Failure f;
  if (!p->engine->plan(make_request(s), &plan, &f)) {
    fail_start(self, f, "The requested clip is not possible");
    return;
  }
  GST_INFO_OBJECT(self,
                  "clip: %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
                  " frames in %" G_GINT64_FORMAT " chunks, %" G_GINT64_FORMAT " steps",
                  plan.width, plan.height, plan.num_frames, plan.total_chunks, plan.steps);
  post_progress(self, GST_PROGRESS_TYPE_COMPLETE, "model ready");

  const gint fps_n = s.fps_n > 0 ? s.fps_n : static_cast<gint>(plan.fps_n);
  const gint fps_d = s.fps_n > 0 ? s.fps_d : static_cast<gint>(plan.fps_d);
  if (!complete_start(self, GST_FLOW_OK, &plan, fps_n, fps_d)) return;
  run_generation(self);
}

// Cancels a running request and waits for the worker. Prompt: the engine stops
// at its next step or chunk boundary, and the queue releases a blocked sink.
void cancel_and_join(GstH3VideoSrc* self) {
  H3VideoSrcPrivate* p = self->priv;
  {
    std::lock_guard<std::mutex> lock(p->run_lock);
    p->stopping = true;
    if (p->generating) p->engine->cancel();
  }
  p->queue.abort();
  if (p->worker.joinable()) p->worker.join();
  std::lock_guard<std::mutex> lock(p->run_lock);
  p->stopping = false;
}

// A flush throws away what was generated: the running request is cancelled and
// the next create() generates the clip again from the first frame.
void handle_flush_start(GstH3VideoSrc* self) {
  H3VideoSrcPrivate* p = self->priv;
  std::lock_guard<std::mutex> lock(p->run_lock);
  GST_OBJECT_LOCK(self);
  const bool have_plan = p->have_plan;
  GST_OBJECT_UNLOCK(self);
  if (!have_plan) return;  // still starting: nothing generated yet
  p->restart_pending = true;
  if (p->generating) p->engine->cancel();
  p->queue.abort();
}

// After a flush: the old request was cancelled; generate the clip again.
void restart_generation(GstH3VideoSrc* self) {
  H3VideoSrcPrivate* p = self->priv;
  GST_DEBUG_OBJECT(self, "restarting the request after a flush");
  if (p->worker.joinable()) p->worker.join();
  p->restart_pending = false;
  p->queue.reset();
  p->frame_n = 0;
  p->have_pending = false;
  p->pending = h3gst::Frame();
  p->tags_sent = false;
  p->first_running = GST_CLOCK_TIME_NONE;
  p->worker = std::thread(run_generation, self);
}

void start_worker(GstH3VideoSrc* self) {
  H3VideoSrcPrivate* p = self->priv;
  if (p->worker.joinable()) p->worker.join();  // a finished worker of an earlier, failed start
  p->worker = std::thread(worker_main, self);
}

}  // namespace h3src
