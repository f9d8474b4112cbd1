#include "generation.h"

#include <gst/gst.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine_loader.h"
#include "just_in_time.h"

namespace h3gst {

Generation::Generation(Observer& observer, GstDebugCategory* category, GstObject* log_object)
    : observer_(observer), category_(category), log_object_(log_object) {}

Generation::~Generation() {
  stop();
  close_engine();
  std::lock_guard<std::mutex> lock(mutex_);
  if (offered_) gst_object_unref(offered_);
  offered_ = nullptr;
}

void Generation::close_engine() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_engine();
}

void Generation::release_engine() {
  stream_.reset();  // before the engine: a stream lives on it
  if (engine_) {
    if (started_on_engine_) engine_started(engine_, false);
    started_on_engine_ = false;
    release_engine_hold(engine_);  // the last holder closes it, here
    gst_object_unref(engine_);
  }
  engine_ = nullptr;
}

void Generation::offer_engine(GstH3Engine* engine) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (offered_) gst_object_unref(offered_);
  offered_ = engine ? GST_H3_ENGINE(gst_object_ref(engine)) : nullptr;
}

bool Generation::has_offered_engine() {
  std::lock_guard<std::mutex> lock(mutex_);
  return offered_ != nullptr;
}

GstH3Engine* Generation::engine() {
  std::lock_guard<std::mutex> lock(mutex_);
  return engine_ ? GST_H3_ENGINE(gst_object_ref(engine_)) : nullptr;
}

int Generation::others_started_on_engine() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!engine_) return 0;
  return engine_started_count(engine_) - (started_on_engine_ ? 1 : 0);
}

void Generation::start(Request request) {
  if (worker_.joinable()) worker_.join();  // a finished worker of an earlier, failed start
  request_ = std::move(request);
  queue_.reset();
  queue_.set_max_chunks(request_.queue_chunks);
  audio_queue_.reset();
  audio_queue_.set_max_chunks(request_.queue_chunks + 1);
  restart_pending_ = false;
  worker_ = std::thread(&Generation::worker_main, this);
}

void Generation::stop() {
  wake_hold();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    if (generating_) stream_->cancel();
  }
  queue_.abort();  // releases a sink blocked in push()
  audio_queue_.abort();
  if (worker_.joinable()) worker_.join();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = false;
    planned_ = false;
    ending_ = false;
    if (started_on_engine_) engine_started(engine_, false);
    started_on_engine_ = false;
  }
  queue_.reset();
  audio_queue_.reset();
}

void Generation::end() {
  wake_hold();
  std::lock_guard<std::mutex> lock(mutex_);
  ending_ = true;
  if (generating_) {
    // An endless stream is finished, not cancelled: its last whole chunk and the soundtrack up
    // to it still come.
    if (request_.clip.num_frames == h3::kEndless) {
      stream_->finish();
    } else {
      stream_->cancel();
    }
    return;
  }
  queue_.finish();
  audio_queue_.finish();
}

void Generation::change_prompt(const std::string& prompt, double at_seconds) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!generating_) return;
    stream_->change_prompt(prompt, at_seconds);
  }
  // Given while the engine is held (queue-chunks=0), the change is taken by the chunk it begins
  // next: it begins now, so that encoding the prompt does not make that chunk late.
  wake_hold();
}

void Generation::wake_hold() {
  std::lock_guard<std::mutex> lock(hold_mutex_);
  hold_wake_ = true;
  hold_woken_.notify_all();
}

void Generation::hold(std::chrono::steady_clock::time_point until) {
  std::unique_lock<std::mutex> lock(hold_mutex_);
  hold_woken_.wait_until(lock, until, [&] { return hold_wake_; });
  hold_wake_ = false;
}

std::chrono::steady_clock::duration Generation::frame_duration() const {
  const bool own = request_.fps_n > 0 && request_.fps_d > 0;
  const int64_t n = own ? request_.fps_n : plan_.fps_n, d = own ? request_.fps_d : plan_.fps_d;
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::nanoseconds(1000000000LL * d / n));
}

void Generation::change_steps(int64_t steps) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (generating_) stream_->change_steps(steps);
}

void Generation::cancel_and_arm_restart() {
  wake_hold();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!planned_) return;  // still starting: nothing generated yet
  restart_pending_ = true;
  if (generating_) stream_->cancel();
  queue_.abort();
  audio_queue_.abort();
}

void Generation::restart() {
  GST_CAT_DEBUG_OBJECT(category_, log_object_, "restarting the request after a flush");
  if (worker_.joinable()) worker_.join();
  observer_.restarting();
  restart_pending_ = false;
  queue_.reset();
  audio_queue_.reset();
  worker_ = std::thread(&Generation::run, this);
}

FrameQueue::PopResult Generation::pop(Frame* frame, EngineFailure* failure) {
  return queue_.pop(frame, failure);
}

AudioQueue::PopResult Generation::pop_audio(AudioSlice* slice, int64_t max_samples, EngineFailure* failure) {
  return audio_queue_.pop(slice, max_samples, failure);
}

void Generation::worker_main() {
  std::string error, module_path;
  const EngineModule* module = load_engine_module(request_.plugin_dir, &error, &module_path);
  if (!module) {
    observer_.module_missing(error);
    complete_start(nullptr);
    return;
  }
  GST_CAT_DEBUG_OBJECT(category_, log_object_, "engine module %s", module_path.c_str());
  EngineFailure failure;
  // The layout's fit on each rank's device, before anything is loaded.
  if (!module->fit(request_.engine, request_.clip, &failure)) {
    fail_start(failure, "The requested clip does not fit the devices");
    return;
  }
  if (!open_engine(*module, &failure)) {
    fail_start(failure, "Could not open the H3 model");
    return;
  }
  if (!engine_handle(engine_).plan(request_.clip, &plan_, &failure)) {
    fail_start(failure, "The requested clip is not possible");
    return;
  }
  EngineFailure marking;
  if (!observer_.planned(plan_, model_dir_, &marking)) {
    fail_start(marking, "Could not mark the stream");
    return;
  }
  if (complete_start(&plan_)) run();
}

bool Generation::open_engine(const EngineModule& module, EngineFailure* failure) {
  EngineKey key;
  key.options = request_.engine;
  if (key.options.model_dir.empty()) key.options.model_dir = module.default_model_dir();
  model_dir_ = key.options.model_dir;
  key.lora = request_.clip.lora;
  key.group = request_.engine_group;
  GstH3Engine* offered = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (engine_ && engine_key_difference(engine_key(engine_), key).empty()) {
      engine_started(engine_, true);
      started_on_engine_ = true;
      return true;
    }
    release_engine();
    offered = std::exchange(offered_, nullptr);
  }
  GstH3Engine* engine = nullptr;
  bool from_context = false;
  if (offered) {
    const std::string differs = engine_key_difference(key, engine_key(offered));
    if (differs.empty()) {
      GST_CAT_DEBUG_OBJECT(category_, log_object_, "using the engine of the h3.engine context");
      engine = offered;
      from_context = true;
    } else {
      GST_CAT_DEBUG_OBJECT(category_, log_object_,
                           "not using the h3.engine context's engine: its option '%s' differs from this "
                           "element's; using the engine of this element's options",
                           differs.c_str());
      gst_object_unref(offered);
    }
  }
  if (!engine) {
    std::vector<std::string> others;
    engine = engine_for_key(key, &others);
    for (const std::string& o : others) {
      GST_CAT_DEBUG_OBJECT(category_, log_object_, "not sharing %s", o.c_str());
    }
  }
  bool opened_here = false;
  if (!hold_engine(
          engine, module, [this](const h3::Progress& p) { observer_.progress(p); },
          [&] { observer_.opening(key.options); }, failure, &opened_here)) {
    gst_object_unref(engine);
    return false;
  }
  GST_CAT_DEBUG_OBJECT(category_, log_object_,
                       opened_here ? "opened the engine" : "sharing the engine another holder opened");
  EngineStream* stream = engine_handle(engine).open_stream();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    engine_ = engine;
    stream_.reset(stream);
    engine_started(engine_, true);
    started_on_engine_ = true;
  }
  if (!from_context) observer_.have_engine(engine);
  return true;
}

void Generation::fail_start(const EngineFailure& failure, const char* what) {
  observer_.start_failed(failure, what);
  complete_start(nullptr);
}

bool Generation::complete_start(const h3::ClipPlan* plan) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return false;
  planned_ = plan != nullptr;
  observer_.complete_start(plan);
  if (!plan) {
    // Nothing will come: wake consumers already waiting (the failure was reported).
    queue_.abort();
    audio_queue_.abort();
  }
  return true;
}

// Runs the request; the queue ends with finish() or fail(), or was aborted.
void Generation::run() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || ending_) return;  // ending_: the queues were finished already
    stream_->reset_cancel();
    generating_ = true;
  }
  auto on_progress = [&](const h3::Progress& p) { observer_.progress(p); };
  // When the previous chunk's frames were taken into the queue: the next chunk's cycle starts
  // there (a wait for room in a full queue, or a just-in-time hold, is the consumer's pace, not
  // production).
  std::optional<std::chrono::steady_clock::time_point> taken;
  // queue-chunks=0 on a live stream: the engine is held on the hand-over that ends a chunk (its
  // soundtrack's stretch when the request has audio: that stretch is due with the chunk's
  // frames) until it is time to begin the next one (just_in_time.h).
  std::optional<JustInTime> just_in_time;
  if (request_.just_in_time) just_in_time.emplace(frame_duration());
  {
    std::lock_guard<std::mutex> lock(hold_mutex_);
    hold_wake_ = false;  // a wake-up for an earlier request
  }
  // The engine hands a chunk's frames over first and its soundtrack's stretch after (two
  // FrameChunks with the same index): each goes to its own queue as soon as it exists.
  auto on_chunk = [&](FrameChunk&& chunk) {
    const int64_t frames = chunk.count, chunk_index = chunk.index;
    if (just_in_time && frames > 0 && taken)
      just_in_time->produced(std::chrono::steady_clock::now() - *taken);
    GST_CAT_LOG_OBJECT(category_, log_object_,
                       "chunk %" G_GINT64_FORMAT ": %" G_GINT64_FORMAT " frames from %" G_GINT64_FORMAT
                       ", %" G_GINT64_FORMAT " audio samples from %" G_GINT64_FORMAT,
                       chunk.index, chunk.count, chunk.first_frame, chunk.audio.count,
                       chunk.audio.first_sample);
    if (chunk.count > 0) {
      auto time = std::chrono::nanoseconds(chunk.decode_ns);
      if (taken)
        time = std::max(time, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::steady_clock::now() - *taken));
      observer_.chunk_decoded(time);
    }
    const bool pushed = (chunk.audio.count == 0 || audio_queue_.push(std::move(chunk.audio))) &&
                        (chunk.count == 0 || queue_.push(std::move(chunk)));
    if (just_in_time && pushed) {
      if (frames > 0) just_in_time->queued(std::chrono::steady_clock::now(), frames);
      if (request_.clip.audio ? frames == 0 : frames > 0) {
        const auto begin = just_in_time->begin_next();
        using std::chrono::milliseconds;
        const auto ms = [](auto d) {
          return static_cast<gint64>(std::chrono::duration_cast<milliseconds>(d).count());
        };
        // A negative hold: the engine is late by that much (its lead is longer than what was left).
        GST_CAT_DEBUG_OBJECT(category_, log_object_,
                             "chunk %" G_GINT64_FORMAT " queued: holding the engine %" G_GINT64_FORMAT
                             " ms (lead %" G_GINT64_FORMAT " ms)",
                             static_cast<gint64>(chunk_index),
                             begin == std::chrono::steady_clock::time_point{}
                                 ? 0
                                 : ms(begin - std::chrono::steady_clock::now()),
                             ms(just_in_time->lead()));
        hold(begin);
      }
    }
    taken = std::chrono::steady_clock::now();
    return pushed;
  };
  EngineFailure failure;
  const bool ok = stream_->generate(request_.clip, plan_, on_chunk, on_progress, &failure);
  bool ending = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generating_ = false;
    ending = ending_;
  }
  if (ok || (ending && failure.kind == h3::ErrorKind::kCancelled)) {
    audio_queue_.finish();
    queue_.finish();
  } else if (failure.kind == h3::ErrorKind::kCancelled) {
    GST_CAT_DEBUG_OBJECT(category_, log_object_, "request cancelled");
    queue_.abort();
    audio_queue_.abort();
  } else {
    GST_CAT_DEBUG_OBJECT(category_, log_object_, "request failed: %s", failure.message.c_str());
    queue_.fail(failure);
    audio_queue_.fail(failure);
  }
}

}  // namespace h3gst
