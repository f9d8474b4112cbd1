// One lifecycle behind h3videosrc and h3src: the properties (under the object lock), the
// settings snapshot a start takes, the Generation (engine worker, queues, engine handle), what
// the worker publishes for the element's other threads (the plan, the rate, the live latency),
// start and stop, the flush that generates the clip again, the application's EOS, and the frames
// and samples taken from the queues, checked and stamped. Each element keeps what is its own —
// caps, allocation, pads and streaming (fill(), the pad tasks) — as videotestsrc keeps its
// element apart from its generator. Locks: docs/element.md, "Locks".
#pragma once

#include <gst/gst.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "generation.h"
#include "h3/model_clock.h"
#include "pace_policy.h"
#include "prompt_times.h"
#include "settings.h"
#include "stream_record.h"

namespace h3gst {

// What the generation's worker publishes once the start completes (and the live latency it
// measures afterwards). Copied out under the object lock.
struct Published {
  bool have_plan = false;
  h3::ClipPlan plan{};
  gint fps_n = static_cast<gint>(h3::dit::kFps), fps_d = 1;  // the framerate property's rate, else the plan's
  int64_t property_frames = -1;  // the num-frames property; -1: the model's default
  // Live latency: the slowest chunk's production time so far (its decode, or the cycle since the
  // previous chunk was taken), and what was last reported.
  GstClockTime chunk_time = GST_CLOCK_TIME_NONE;
  GstClockTime reported_latency = GST_CLOCK_TIME_NONE;

  // Frames of the clip: the plan's, the num-frames property's until the plan is known; -1: unknown.
  int64_t frames() const { return have_plan ? plan.num_frames : property_frames; }
};

class Lifecycle final : private Generation::Observer {
 public:
  // The element's part of completing its start, on the generation's worker with the
  // generation's lock held (never while a stop has begun). `plan` null: the start failed and
  // the failure was posted. The element publishes the plan (publish_plan) where its streaming
  // needs it: h3videosrc under its pad's stream lock, before gst_base_src_start_complete().
  using CompleteStart = std::function<void(const h3::ClipPlan* plan)>;

  Lifecycle(GstElement* element, GstDebugCategory* category, CompleteStart complete_start);
  Lifecycle(const Lifecycle&) = delete;
  Lifecycle& operator=(const Lifecycle&) = delete;

  // ---- properties (GST_OBJECT_LOCK) ----
  // A change while the element is started or above READY is refused with a warning naming the
  // property (every property shapes the request or the engine). False: not one of ours.
  bool set_property(guint id, const GValue* value, GParamSpec* pspec);
  // A new prompt for the running causal stream, from its first chunk whose first frame's running
  // time is at or after `running_time` (GST_CLOCK_TIME_NONE: the next chunk; PromptTimes says
  // how a running time becomes the stream's time); the `prompt` property set while started and
  // the `h3-prompt` event come here. False (with a warning) when the stream cannot take it: an
  // empty prompt, not started, or not sampler=causal.
  bool change_prompt(const std::string& prompt, GstClockTime running_time);
  // The `h3-prompt` event sent to the element (custom upstream, fields `prompt` and optional
  // `running-time`): true when `event` is one (then *accepted says whether it was taken).
  bool prompt_event(GstEvent* event, bool* accepted);
  bool get_property(guint id, GValue* value) const;
  bool live_property() const;

  // ---- states ----
  // READY -> PAUSED: takes the settings snapshot, checks it (false with an error posted), and
  // starts the worker (opens the engine, plans, completes the start, generates). `audio`: the
  // soundtrack too.
  bool start(bool audio);
  // Stops the worker and forgets the plan. Idempotent: also after a failed start.
  void stop();
  // READY -> NULL: lets go of the engine kept across stop() and start() with the same options
  // (the last element or application holding it closes it).
  void close_engine() { generation_.close_engine(); }

  // ---- the shared engine (shared_engine.h) ----
  // GstElement::set_context: an "h3.engine" context's engine is used at the next start when its
  // options are this element's.
  void set_context(GstContext* context);
  // A GST_QUERY_CONTEXT for "h3.engine": answered with the engine this element holds (true).
  bool answer_context_query(GstQuery* query);
  // Wakes (true) or stops waking (false) consumers blocked in the queues: GstBaseSrc's
  // unlock/unlock_stop, h3src's pad tasks around state changes and flushes.
  void set_flushing(bool flushing) { generation_.set_flushing(flushing); }
  // FLUSH_START: the running request is cancelled and its frames thrown away.
  void flush_start() { generation_.cancel_and_arm_restart(); }
  // The streaming thread after a flush: generates the clip again from its first frame and returns
  // true (the element's streaming state starts over), or false when no flush threw one away.
  bool restart_if_flushed();
  // An EOS sent to the element (gst-launch-1.0 -e): the clip ends early, both queues wake.
  void request_eos();
  bool eos_requested() const { return eos_requested_; }
  // Chunk k is computed from chunk k-1's state, so a clip cannot be entered in the middle: both
  // elements refuse every seek, sent to the element or arriving on a pad. True (logged) when
  // `event` is a seek; the caller refuses it.
  bool refuses_seek(GstEvent* event) const;

  // ---- the worker's publications ----
  Published published() const;
  // The start's plan and rate for the other threads; from the CompleteStart callback.
  void publish_plan(const h3::ClipPlan& plan);
  // The start's snapshot of the properties: written by start(), read-only until stop().
  const Settings& active() const { return active_; }

  // ---- streaming ----
  enum class Pop { kData, kFlushing, kEnd, kError };
  // The next frame, which must be frame `expected` of the plan; `pub` receives the publication
  // as it is once the frame came (the plan is out before any chunk is). kError: the generation's
  // failure (posted once for both of h3src's pads) or a frame out of place was posted.
  Pop pop_frame(Frame* frame, int64_t expected, Published* pub);
  // The next stretch of at most `max_samples` sample frames, which must start at `expected`.
  Pop pop_audio(AudioSlice* slice, int64_t max_samples, int64_t expected, Published* pub);
  // kEnd: true when all `planned` units went out; else an error naming both counts is posted.
  bool ended_complete(int64_t delivered, int64_t planned, const char* unit);
  // Whether a stream whose queue gave no data (`why`) ends with EOS: at the clip's end when every
  // unit went out (ended_complete), and after an application's EOS (the queues then end early, or
  // wake as flushing); not for a flush, a state change or a failure.
  bool stream_ends(Pop why, int64_t delivered, int64_t planned, const char* unit);

  // PTS, DURATION and OFFSET/OFFSET_END from counts (gst_util_uint64_scale: no drift), DISCONT
  // on the first: frame `n` at fps_n/fps_d, or the sample frames [first, first + count) at `rate`.
  static void stamp_frame(GstBuffer* buf, int64_t n, gint fps_n, gint fps_d);
  static void stamp_samples(GstBuffer* buf, int64_t first, int64_t count, gint rate);
  static GstClockTime frame_time(int64_t n, gint fps_n, gint fps_d);
  static GstClockTime sample_time(int64_t n, gint rate);
  // The streaming thread: frame `n` went out at `running_time` (h3videosrc: seen by a probe on its
  // pad; h3src: as its video pad pushes it). Posts `h3-prompt-applied` when it is the first frame
  // of a chunk that took a new prompt.
  void frame_pushed(int64_t n, GstClockTime running_time);

  // ---- keeping pace (`pace=steps`; docs/element.md, "Keeping pace") ----
  // The streaming thread: chunk `chunk`'s first frame was ready `lateness` after its running time
  // (negative: before; live_timing.h; none when not live: downstream's QoS alone then). The policy
  // may ask the engine for another step count.
  void chunk_paced(int64_t chunk, std::optional<GstClockTimeDiff> lateness);
  // A QoS event from downstream: its lateness joins the next chunk's.
  void downstream_qos(GstEvent* event);

  // ---- marking (docs/element.md, "Marking") ----
  // The stream's record: made once the request is planned, with each prompt the engine took.
  const StreamRecord& record() const { return record_; }
  // GST_QUERY_CUSTOM `h3-record` (marking_query.h): answered with the record (true) once there
  // is one.
  bool answer_record_query(GstQuery* query) const;

 private:
  // Generation::Observer, on the worker thread.
  void module_missing(const std::string& error) override;
  void opening(const h3::EngineOptions& options) override;
  void have_engine(GstH3Engine* engine) override;
  void start_failed(const EngineFailure& failure, const char* what) override;
  bool planned(const h3::ClipPlan& plan, const std::string& model_dir, EngineFailure* failure) override;
  void complete_start(const h3::ClipPlan* plan) override;
  void progress(const h3::Progress& progress) override;
  void chunk_decoded(std::chrono::nanoseconds time) override;
  void restarting() override;
  void steps_applied(const h3::Progress& progress);

  void post_failure_once(const EngineFailure& failure);
  // Before a start without a context's engine: asks downstream (GST_QUERY_CONTEXT), then the
  // application and the bins (GST_MESSAGE_NEED_CONTEXT), as GL and CUDA elements do.
  void ask_for_engine_context();

  GstElement* const element_;
  GstDebugCategory* const category_;
  const CompleteStart complete_start_;

  // GST_OBJECT_LOCK: the property values, whether a start took them, what the worker published.
  Settings props_;
  bool started_ = false;
  Published pub_;

  Settings active_;  // see active()
  std::atomic<bool> eos_requested_{false};
  std::atomic<bool> failure_posted_{false};  // h3src's two pads learn one failure: posted once
  PromptTimes prompt_times_;  // the stream's prompt changes and its origin on the running clock
  StreamRecord record_;       // what the stream says about itself
  // pace=steps on a causal stream: the policy, and the decision the engine has yet to report as
  // applied (its lateness and reason go into h3-pace). Under pace_mutex_: the streaming thread,
  // the QoS event's thread and the worker (the engine's reports, the chunks' times) all reach it.
  std::mutex pace_mutex_;
  std::optional<PacePolicy> pace_;
  std::optional<PaceDecision> pace_asked_;
  int64_t production_ns_ = 0;  // the latest chunk's production time
  bool audio_ = false;         // this start asked for the soundtrack; written by start() before the worker

  Generation generation_;  // last: its worker calls back into the members above until stop()
};

}  // namespace h3gst
