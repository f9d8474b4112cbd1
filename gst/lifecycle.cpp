#include "lifecycle.h"

#include <algorithm>
#include <utility>

#include "engine_loader.h"
#include "h3/error.h"
#include "marking_query.h"
#include "messages.h"
#include "settings_checks.h"
#include "shared_engine.h"

namespace h3gst {

Lifecycle::Lifecycle(GstElement* element, GstDebugCategory* category, CompleteStart complete_start)
    : element_(element),
      category_(category),
      complete_start_(std::move(complete_start)),
      generation_(*this, category, GST_OBJECT(element)) {}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

bool Lifecycle::set_property(guint id, const GValue* value, GParamSpec* pspec) {
  // Before the object lock (the generation's lock comes first: docs/element.md, "Locks").
  const int others = engine_property(id) ? generation_.others_started_on_engine() : 0;
  GST_OBJECT_LOCK(element_);
  if (id == PROP_PROMPT && started_ && active_.sampler == h3::Sampler::kCausal) {
    // A causal stream takes a new prompt while it plays: from the chunk being made or the next.
    const gchar* text = g_value_get_string(value);
    props_.prompt = text ? text : "";
    GST_OBJECT_UNLOCK(element_);
    change_prompt(text ? text : "", GST_CLOCK_TIME_NONE);
    return true;
  }
  if (GST_STATE(element_) > GST_STATE_READY || started_) {
    GST_OBJECT_UNLOCK(element_);
    GST_ELEMENT_WARNING(
        element_, CORE, STATE_CHANGE,
        ("Property '%s' can only be changed in the NULL or READY state; the change is ignored", pspec->name),
        ("set while the element is PAUSED or PLAYING"));
    return true;
  }
  if (others > 0) {
    GST_OBJECT_UNLOCK(element_);
    GST_ELEMENT_WARNING(element_, CORE, STATE_CHANGE,
                        ("Property '%s' is an option of the engine this element shares with %d other playing "
                         "element(s); the change is refused",
                         pspec->name, others),
                        ("stop the other elements first, or give this element an engine-group of its own"));
    return true;
  }
  const bool ours = h3gst::set_property(&props_, id, value);
  GST_OBJECT_UNLOCK(element_);
  return ours;
}

bool Lifecycle::get_property(guint id, GValue* value) const {
  GST_OBJECT_LOCK(element_);
  const bool ours = h3gst::get_property(props_, id, value);
  GST_OBJECT_UNLOCK(element_);
  return ours;
}

bool Lifecycle::live_property() const {
  GST_OBJECT_LOCK(element_);
  const bool live = props_.live;
  GST_OBJECT_UNLOCK(element_);
  return live;
}

// ---------------------------------------------------------------------------
// States
// ---------------------------------------------------------------------------

bool Lifecycle::start(bool audio) {
  GST_OBJECT_LOCK(element_);
  active_ = props_;
  GST_OBJECT_UNLOCK(element_);
  const Settings& s = active_;
  if (!check_settings(element_, s)) return false;
  eos_requested_ = false;
  failure_posted_ = false;
  audio_ = audio;
  record_.clear();
  GST_OBJECT_LOCK(element_);
  started_ = true;
  pub_ = Published();
  if (s.fps_n > 0) {
    pub_.fps_n = s.fps_n;
    pub_.fps_d = s.fps_d;
  }
  if (s.num_frames > 0) pub_.property_frames = s.num_frames;
  GST_OBJECT_UNLOCK(element_);

  post_open_progress(element_, GST_PROGRESS_TYPE_START, "opening the H3 engine");
  Generation::Request request;
  request.plugin_dir = plugin_dir_of(element_);
  // A module that is not there fails the start here, not on the worker a moment later: an error
  // posted from another thread while the application is still between set_state() and its bus
  // loop can be missed (gst-launch-1.0 quits its main loop from its bus sync handler; a quit before
  // the loop runs is lost, and it waits for the preroll forever).
  if (std::string missing; !engine_module_present(request.plugin_dir, &missing)) {
    module_missing(missing);
    return false;
  }
  request.engine = to_engine_options(s);
  try {
    request.clip = to_request(s);
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(element_, RESOURCE, SETTINGS, ("%s", e.what()), ("prompt-timeline"));
    post_open_progress(element_, GST_PROGRESS_TYPE_ERROR, "the prompt timeline cannot be used");
    return false;
  }
  // A model that cannot serve the pictures refuses before any of them is decoded.
  int64_t default_frames = 0;
  if (!s.first_frame.empty() || !s.last_frame.empty() || !s.references.empty()) {
    std::string error;
    const EngineModule* module = load_engine_module(request.plugin_dir, &error);
    if (!module) {
      module_missing(error);
      return false;
    }
    h3::TaskAsk ask;
    ask.first_frame = !s.first_frame.empty();
    ask.last_frame = !s.last_frame.empty();
    ask.references = !s.references.empty();
    ask.embeddings = !request.clip.embeds_path.empty();
    EngineFailure failure;
    if (!module->check_task(request.engine, ask, &default_frames, &failure)) {
      start_failed(failure, "The requested clip is not possible");
      return false;
    }
  }
  try {
    read_pictures(s, default_frames, request.clip);
  } catch (const h3::Error& e) {
    if (e.kind() == h3::ErrorKind::kNotFound) {
      GST_ELEMENT_ERROR(element_, RESOURCE, NOT_FOUND, ("%s", e.what()),
                        ("first-frame / last-frame / references"));
    } else {
      GST_ELEMENT_ERROR(element_, RESOURCE, OPEN_READ, ("%s", e.what()),
                        ("first-frame / last-frame / references"));
    }
    post_open_progress(element_, GST_PROGRESS_TYPE_ERROR, "a picture cannot be used");
    return false;
  }
  request.clip.audio = audio;
  // queue-chunks=0: one chunk in the queue, and on a live stream the engine begins each next
  // chunk just in time; a stream that is not live has no clock to be in time for.
  request.queue_chunks = static_cast<size_t>(std::max(1, s.queue_chunks));
  request.just_in_time = s.queue_chunks == 0 && s.live;
  request.fps_n = s.fps_n;
  request.fps_d = s.fps_d;
  request.engine_group = s.engine_group;
  ask_for_engine_context();
  prompt_times_.reset();
  {
    std::lock_guard<std::mutex> lock(pace_mutex_);
    pace_.reset();
    pace_asked_.reset();
    production_ns_ = 0;
    if (s.pace == Pace::kSteps) {
      PaceSettings ps;
      ps.steps = request.clip.steps != 0 ? request.clip.steps : h3::kDefaultCausalSteps;
      ps.min_steps = request.clip.min_steps;
      const gint fps_n = s.fps_n > 0 ? s.fps_n : static_cast<gint>(h3::dit::kFps),
                 fps_d = s.fps_n > 0 ? s.fps_d : 1;
      ps.period_ns = static_cast<int64_t>(frame_time(h3::dit::kChunkFrames, fps_n, fps_d));
      pace_.emplace(ps);
    }
  }
  generation_.set_flushing(false);
  generation_.start(std::move(request));
  return true;
}

void Lifecycle::stop() {
  generation_.stop();
  generation_.set_flushing(false);
  record_.clear();
  GST_OBJECT_LOCK(element_);
  pub_.have_plan = false;
  started_ = false;
  GST_OBJECT_UNLOCK(element_);
}

bool Lifecycle::restart_if_flushed() {
  if (!generation_.restart_pending()) return false;
  GST_CAT_DEBUG_OBJECT(category_, element_, "generating the clip again after a flush");
  generation_.restart();
  return true;
}

bool Lifecycle::change_prompt(const std::string& prompt, GstClockTime running_time) {
  if (prompt.empty()) {
    GST_ELEMENT_WARNING(element_, LIBRARY, SETTINGS,
                        ("An empty prompt was given; the stream keeps its prompt"), (nullptr));
    return false;
  }
  GST_OBJECT_LOCK(element_);
  const bool causal = started_ && active_.sampler == h3::Sampler::kCausal;
  GST_OBJECT_UNLOCK(element_);
  if (!causal) {
    GST_ELEMENT_WARNING(element_, LIBRARY, SETTINGS,
                        ("A prompt change while playing needs sampler=causal; it applies at the next start"),
                        (nullptr));
    return false;
  }
  // The stream's time of a running time: a live stream's frames carry the running time at which
  // its first frame was ready on top of their time in the stream.
  const double at = GST_CLOCK_TIME_IS_VALID(running_time)
                        ? static_cast<double>(prompt_times_.to_stream_time(running_time)) / GST_SECOND
                        : 0.0;
  GST_CAT_INFO_OBJECT(category_, element_, "prompt change from %.3f s: \"%s\"", at, prompt.c_str());
  generation_.change_prompt(prompt, at);
  return true;
}

bool Lifecycle::prompt_event(GstEvent* event, bool* accepted) {
  if (GST_EVENT_TYPE(event) != GST_EVENT_CUSTOM_UPSTREAM && GST_EVENT_TYPE(event) != GST_EVENT_CUSTOM_BOTH) {
    return false;
  }
  const GstStructure* s = gst_event_get_structure(event);
  if (s == nullptr || !gst_structure_has_name(s, "h3-prompt")) return false;
  const gchar* prompt = gst_structure_get_string(s, "prompt");
  guint64 at = GST_CLOCK_TIME_NONE;
  if (gst_structure_has_field(s, "running-time") && !gst_structure_get_uint64(s, "running-time", &at)) {
    GST_ELEMENT_WARNING(element_, LIBRARY, SETTINGS, ("The h3-prompt event's running-time must be a guint64"),
                        (nullptr));
    *accepted = false;
    return true;
  }
  *accepted = change_prompt(prompt ? prompt : "", at);
  return true;
}

void Lifecycle::request_eos() {
  GST_CAT_DEBUG_OBJECT(category_, element_, "EOS requested: ending the clip");
  eos_requested_ = true;
  generation_.end();
}

bool Lifecycle::refuses_seek(GstEvent* event) const {
  if (GST_EVENT_TYPE(event) != GST_EVENT_SEEK) return false;
  GST_CAT_DEBUG_OBJECT(category_, element_, "refusing a seek: a generated clip is not seekable");
  return true;
}

// ---------------------------------------------------------------------------
// Publications
// ---------------------------------------------------------------------------

Published Lifecycle::published() const {
  GST_OBJECT_LOCK(element_);
  const Published pub = pub_;
  GST_OBJECT_UNLOCK(element_);
  return pub;
}

void Lifecycle::publish_plan(const h3::ClipPlan& plan) {
  GST_OBJECT_LOCK(element_);
  pub_.plan = plan;
  pub_.have_plan = true;
  if (active_.fps_n <= 0) {
    pub_.fps_n = plan.fps_n;
    pub_.fps_d = plan.fps_d;
  }
  GST_OBJECT_UNLOCK(element_);
}

// ---------------------------------------------------------------------------
// Streaming
// ---------------------------------------------------------------------------

void Lifecycle::post_failure_once(const EngineFailure& failure) {
  if (!failure_posted_.exchange(true)) post_failure(element_, failure, "Generation failed");
}

Lifecycle::Pop Lifecycle::pop_frame(Frame* f, int64_t expected, Published* out) {
  EngineFailure failure;
  const FrameQueue::PopResult r = generation_.pop(f, &failure);
  *out = published();
  const Published& pub = *out;
  switch (r) {
    case FrameQueue::PopResult::kFrame: break;
    case FrameQueue::PopResult::kFlushing: return Pop::kFlushing;
    case FrameQueue::PopResult::kEnd: return Pop::kEnd;
    case FrameQueue::PopResult::kError: post_failure_once(failure); return Pop::kError;
  }
  if (f->index != expected || f->width != pub.plan.width || f->height != pub.plan.height) {
    GST_ELEMENT_ERROR(element_, STREAM, FAILED, ("The engine delivered an unexpected frame"),
                      ("frame %" G_GINT64_FORMAT " (%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
                       "), expected %" G_GINT64_FORMAT " (%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT ")",
                       f->index, f->width, f->height, expected, pub.plan.width, pub.plan.height));
    return Pop::kError;
  }
  return Pop::kData;
}

Lifecycle::Pop Lifecycle::pop_audio(AudioSlice* a, int64_t max_samples, int64_t expected, Published* out) {
  EngineFailure failure;
  const AudioQueue::PopResult r = generation_.pop_audio(a, max_samples, &failure);
  *out = published();
  switch (r) {
    case AudioQueue::PopResult::kSamples: break;
    case AudioQueue::PopResult::kFlushing: return Pop::kFlushing;
    case AudioQueue::PopResult::kEnd: return Pop::kEnd;
    case AudioQueue::PopResult::kError: post_failure_once(failure); return Pop::kError;
  }
  if (a->first_sample != expected || a->channels != 2) {
    GST_ELEMENT_ERROR(element_, STREAM, FAILED, ("The engine delivered unexpected audio"),
                      ("%d-channel samples from %" G_GINT64_FORMAT ", expected 2 from %" G_GINT64_FORMAT,
                       a->channels, a->first_sample, expected));
    return Pop::kError;
  }
  return Pop::kData;
}

bool Lifecycle::ended_complete(int64_t delivered, int64_t planned, const char* unit) {
  if (delivered == planned) return true;
  GST_ELEMENT_ERROR(element_, STREAM, FAILED,
                    ("The engine ended the clip after %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT " %s",
                     delivered, planned, unit),
                    (nullptr));
  return false;
}

bool Lifecycle::stream_ends(Pop why, int64_t delivered, int64_t planned, const char* unit) {
  if (why == Pop::kEnd) return eos_requested_ || ended_complete(delivered, planned, unit);
  return why == Pop::kFlushing && eos_requested_;
}

GstClockTime Lifecycle::frame_time(int64_t n, gint fps_n, gint fps_d) {
  return gst_util_uint64_scale(static_cast<guint64>(n), static_cast<guint64>(fps_d) * GST_SECOND,
                               static_cast<guint64>(fps_n));
}

void Lifecycle::stamp_frame(GstBuffer* buf, int64_t n, gint fps_n, gint fps_d) {
  GST_BUFFER_PTS(buf) = frame_time(n, fps_n, fps_d);
  GST_BUFFER_DTS(buf) = GST_CLOCK_TIME_NONE;
  GST_BUFFER_DURATION(buf) = frame_time(n + 1, fps_n, fps_d) - GST_BUFFER_PTS(buf);
  GST_BUFFER_OFFSET(buf) = static_cast<guint64>(n);
  GST_BUFFER_OFFSET_END(buf) = static_cast<guint64>(n + 1);
  if (n == 0) GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_DISCONT);
}

void Lifecycle::frame_pushed(int64_t n, GstClockTime running_time) {
  const Published pub = published();
  if (pub.have_plan && n == pub.plan.positions_leave_frame) {
    // The stream's positions pass the trained length from this frame's chunk on: told now, as it
    // plays, not at the start (ClipPlan::positions_warning).
    GST_ELEMENT_WARNING(element_, LIBRARY, SETTINGS, ("%s", pub.plan.positions_warning.c_str()),
                        ("positions=absolute, frame %" G_GINT64_FORMAT, n));
  }
  const int64_t chunk = prompt_times_.pushed(n, frame_time(n, pub.fps_n, pub.fps_d), running_time);
  if (chunk < 0) return;
  gst_element_post_message(
      element_,
      gst_message_new_element(
          GST_OBJECT(element_),
          gst_structure_new("h3-prompt-applied", "chunk", G_TYPE_INT64, static_cast<gint64>(chunk),
                            "running-time", G_TYPE_UINT64, static_cast<guint64>(running_time), nullptr)));
}

bool Lifecycle::answer_record_query(GstQuery* query) const {
  if (!h3gst::is_record_query(query)) return false;
  const std::string json = record_.json();
  if (json.empty()) return false;
  h3gst::answer_record_query(query, json);
  return true;
}

GstClockTime Lifecycle::sample_time(int64_t n, gint rate) {
  return gst_util_uint64_scale(static_cast<guint64>(n), GST_SECOND, static_cast<guint64>(rate));
}

void Lifecycle::stamp_samples(GstBuffer* buf, int64_t first, int64_t count, gint rate) {
  const auto at = [rate](int64_t s) { return sample_time(s, rate); };
  GST_BUFFER_PTS(buf) = at(first);
  GST_BUFFER_DTS(buf) = GST_CLOCK_TIME_NONE;
  GST_BUFFER_DURATION(buf) = at(first + count) - at(first);
  GST_BUFFER_OFFSET(buf) = static_cast<guint64>(first);
  GST_BUFFER_OFFSET_END(buf) = static_cast<guint64>(first + count);
  if (first == 0) GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_DISCONT);
}

// ---------------------------------------------------------------------------
// The generation's worker
// ---------------------------------------------------------------------------

void Lifecycle::module_missing(const std::string& error) {
  GST_ELEMENT_ERROR(element_, LIBRARY, INIT, ("Could not load the H3 engine: %s", error.c_str()), (nullptr));
  post_open_progress(element_, GST_PROGRESS_TYPE_ERROR, "could not load the H3 engine");
}

void Lifecycle::opening(const h3::EngineOptions& o) {
  gchar* text =
      g_strdup_printf("loading %s on %d %s rank(s)", o.model_dir.c_str(), o.ranks, o.device.c_str());
  post_open_progress(element_, GST_PROGRESS_TYPE_CONTINUE, text, 0);
  g_free(text);
}

void Lifecycle::have_engine(GstH3Engine* engine) {
  // Offered as GL offers its display: set on the element itself (its GST_QUERY_CONTEXT answer and
  // gst_element_get_context()) and posted, so that the bins keep it for their other elements and
  // the application may hand it to other pipelines.
  GstContext* context = engine_context_new(engine);
  gst_element_set_context(element_, context);
  GST_CAT_DEBUG_OBJECT(category_, element_, "offering the engine as an h3.engine context");
  gst_element_post_message(element_, gst_message_new_have_context(GST_OBJECT(element_), context));
}

void Lifecycle::set_context(GstContext* context) {
  GstH3Engine* engine = engine_from_context(context);
  if (!engine) return;
  generation_.offer_engine(engine);
  gst_object_unref(engine);
}

bool Lifecycle::answer_context_query(GstQuery* query) {
  const gchar* type = nullptr;
  if (GST_QUERY_TYPE(query) != GST_QUERY_CONTEXT || !gst_query_parse_context_type(query, &type) ||
      g_strcmp0(type, kEngineContextType) != 0) {
    return false;
  }
  GstH3Engine* engine = generation_.engine();
  if (!engine) return false;
  GstContext* context = engine_context_new(engine);
  gst_object_unref(engine);
  gst_query_set_context(query, context);
  gst_context_unref(context);
  return true;
}

void Lifecycle::ask_for_engine_context() {
  if (generation_.has_offered_engine()) return;
  GstQuery* query = gst_query_new_context(kEngineContextType);
  struct Ask {
    GstQuery* query;
    GstContext* found = nullptr;
  } ask{query};
  gst_element_foreach_src_pad(
      element_,
      [](GstElement*, GstPad* pad, gpointer data) -> gboolean {
        auto* a = static_cast<Ask*>(data);
        if (!gst_pad_peer_query(pad, a->query)) return TRUE;
        GstContext* c = nullptr;
        gst_query_parse_context(a->query, &c);
        if (c) a->found = gst_context_ref(c);
        return a->found == nullptr;
      },
      &ask);
  gst_query_unref(query);
  if (ask.found) {
    GST_CAT_DEBUG_OBJECT(category_, element_, "downstream answered the h3.engine context query");
    gst_element_set_context(element_, ask.found);
    gst_context_unref(ask.found);
    return;
  }
  // The application's sync handler, or a bin that keeps an element's context, answers by setting it.
  gst_element_post_message(element_, gst_message_new_need_context(GST_OBJECT(element_), kEngineContextType));
}

void Lifecycle::start_failed(const EngineFailure& failure, const char* what) {
  failure_posted_ = true;
  post_failure(element_, failure, what);
  post_open_progress(element_, GST_PROGRESS_TYPE_ERROR, what);
}

bool Lifecycle::planned(const h3::ClipPlan& plan, const std::string& model_dir, EngineFailure* failure) {
  // The model's hash is computed here, on the worker, before the first chunk (once per process
  // and model: model_digest.h); the stream's tags need it before its first buffer.
  const gint fps_n = active_.fps_n > 0 ? active_.fps_n : static_cast<gint>(plan.fps_n);
  const gint fps_d = active_.fps_n > 0 ? active_.fps_d : static_cast<gint>(plan.fps_d);
  GstElementFactory* factory = gst_element_get_factory(element_);
  const std::string name = factory ? gst_plugin_feature_get_name(GST_PLUGIN_FEATURE(factory)) : "h3";
  try {
    record_.begin(active_, name, plan, model_dir, fps_n, fps_d, audio_);
  } catch (const h3::Error& e) {
    failure->kind = e.kind();
    failure->message = e.what();
    return false;
  }
  GST_CAT_INFO_OBJECT(category_, element_,
                      "clip: %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
                      " frames in %" G_GINT64_FORMAT " chunks, %" G_GINT64_FORMAT " steps",
                      plan.width, plan.height, plan.num_frames, plan.total_chunks, plan.steps);
  for (const std::string& w : plan.warnings) {
    GST_ELEMENT_WARNING(element_, LIBRARY, SETTINGS, ("%s", w.c_str()),
                        ("sampler=%s", h3::to_string(plan.sampler)));
  }
  post_open_progress(element_, GST_PROGRESS_TYPE_COMPLETE, "model ready");
  return true;
}

void Lifecycle::complete_start(const h3::ClipPlan* plan) {
  complete_start_(plan);
}

void Lifecycle::chunk_paced(int64_t chunk, std::optional<GstClockTimeDiff> lateness) {
  std::optional<PaceDecision> d;
  {
    std::lock_guard<std::mutex> lock(pace_mutex_);
    if (!pace_) return;
    d = pace_->observe(chunk, lateness, production_ns_);
    if (d) pace_asked_ = d;
  }
  if (!d) return;
  GST_CAT_INFO_OBJECT(category_, element_,
                      "pace: chunk %" G_GINT64_FORMAT " %s by %" G_GINT64_FORMAT
                      " ms: asking for %" G_GINT64_FORMAT " forwards per chunk",
                      chunk, d->reason == "caught up" ? "ahead" : "late", d->lateness_ns / 1000000, d->steps);
  generation_.change_steps(d->steps);
}

void Lifecycle::downstream_qos(GstEvent* event) {
  GstQOSType type = GST_QOS_TYPE_OVERFLOW;
  gdouble proportion = 1.0;
  GstClockTimeDiff diff = 0;
  GstClockTime timestamp = GST_CLOCK_TIME_NONE;
  gst_event_parse_qos(event, &type, &proportion, &diff, &timestamp);
  if (type == GST_QOS_TYPE_THROTTLE) return;  // a rate cap asked for, not lateness
  std::lock_guard<std::mutex> lock(pace_mutex_);
  if (pace_) pace_->downstream(diff);
}

// The engine took a step change (Phase::kSteps): h3-pace says from which chunk, how many, and
// why (the decision that asked for it).
void Lifecycle::steps_applied(const h3::Progress& progress) {
  PaceDecision why{progress.chunk_steps, 0, "asked"};
  int64_t previous = 0;
  {
    std::lock_guard<std::mutex> lock(pace_mutex_);
    if (pace_) {
      previous = pace_->steps();
      pace_->applied(progress.chunk, progress.chunk_steps);
    }
    if (pace_asked_) why = *pace_asked_;
    pace_asked_.reset();
  }
  gst_element_post_message(
      element_, gst_message_new_element(
                    GST_OBJECT(element_),
                    gst_structure_new("h3-pace", "chunk", G_TYPE_INT64, static_cast<gint64>(progress.chunk),
                                      "steps", G_TYPE_INT, static_cast<gint>(progress.chunk_steps),
                                      "previous-steps", G_TYPE_INT, static_cast<gint>(previous), "lateness",
                                      G_TYPE_INT64, static_cast<gint64>(why.lateness_ns), "reason",
                                      G_TYPE_STRING, why.reason.c_str(), nullptr)));
}

void Lifecycle::progress(const h3::Progress& progress) {
  if (progress.phase == h3::Phase::kSteps) {
    steps_applied(progress);
    return;
  }
  if (progress.phase == h3::Phase::kPrompt) {
    // Where a new prompt took over: its first chunk, reported when that chunk's first frame goes
    // out with its running time (frame_pushed).
    GST_CAT_INFO_OBJECT(category_, element_, "the engine takes the new prompt from chunk %" G_GINT64_FORMAT,
                        static_cast<gint64>(progress.chunk));
    prompt_times_.applied(progress.chunk, progress.frames);
    record_.changed(progress.chunk, progress.prompt);
    return;
  }
  post_h3_progress(element_, progress);
}

// The flush's cancelled request is over (its worker joined) and the clip starts again: the
// changes it took are gone with its frames.
void Lifecycle::restarting() {
  prompt_times_.reset();
  record_.restart();
  // The clip starts again at its requested steps: so does the policy.
  std::lock_guard<std::mutex> lock(pace_mutex_);
  if (pace_) {
    const PaceSettings ps = pace_->settings();
    pace_.emplace(ps);
  }
  pace_asked_.reset();
}

// Like a re-measured processing deadline: a live element tells the pipeline when the slowest
// chunk's production time (Generation::Observer::chunk_decoded) grew by more than a fifth over
// what it last reported.
void Lifecycle::chunk_decoded(std::chrono::nanoseconds time) {
  const auto t = static_cast<GstClockTime>(time.count());
  {
    std::lock_guard<std::mutex> lock(pace_mutex_);
    production_ns_ = static_cast<int64_t>(time.count());
  }
  bool post = false;
  GST_OBJECT_LOCK(element_);
  if (!GST_CLOCK_TIME_IS_VALID(pub_.chunk_time) || t > pub_.chunk_time) pub_.chunk_time = t;
  const GstClockTime est = pub_.chunk_time;
  if (active_.live && (!GST_CLOCK_TIME_IS_VALID(pub_.reported_latency) ||
                       est > pub_.reported_latency * 6 / 5)) {  // 20 % more
    pub_.reported_latency = est;
    post = true;
  }
  GST_OBJECT_UNLOCK(element_);
  if (post) gst_element_post_message(element_, gst_message_new_latency(GST_OBJECT(element_)));
}

}  // namespace h3gst
