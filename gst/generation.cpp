#include "generation.h"

#include <gst/gst.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "engine_loader.h"

namespace h3gst {

Generation::Generation(Observer& observer, GstDebugCategory* category, GstObject* log_object)
    : observer_(observer), category_(category), log_object_(log_object) {}

Generation::~Generation() {
  stop();
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
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    if (generating_) engine_->cancel();
  }
  queue_.abort();  // releases a sink blocked in push()
  audio_queue_.abort();
  if (worker_.joinable()) worker_.join();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = false;
    planned_ = false;
    ending_ = false;
  }
  queue_.reset();
  audio_queue_.reset();
}

void Generation::end() {
  std::lock_guard<std::mutex> lock(mutex_);
  ending_ = true;
  if (generating_) {
    // An endless stream is finished, not cancelled: its last whole chunk and the soundtrack up
    // to it still come.
    if (request_.clip.num_frames == h3::kEndless) {
      engine_->finish();
    } else {
      engine_->cancel();
    }
    return;
  }
  queue_.finish();
  audio_queue_.finish();
}

void Generation::change_prompt(const std::string& prompt, double at_seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (generating_) engine_->change_prompt(prompt, at_seconds);
}

void Generation::cancel_and_arm_restart() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!planned_) return;  // still starting: nothing generated yet
  restart_pending_ = true;
  if (generating_) engine_->cancel();
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
  if (!engine_->plan(request_.clip, &plan_, &failure)) {
    fail_start(failure, "The requested clip is not possible");
    return;
  }
  observer_.planned(plan_);
  if (complete_start(&plan_)) run();
}

bool Generation::open_engine(const EngineModule& module, EngineFailure* failure) {
  h3::EngineOptions options = request_.engine;
  if (options.model_dir.empty()) options.model_dir = module.default_model_dir();
  if (engine_ && options == engine_options_) return true;
  engine_.reset();
  observer_.opening(options);
  EngineHandle* handle = module.open(
      options, [this](const h3::Progress& p) { observer_.progress(p); }, failure);
  if (!handle) return false;
  engine_.reset(handle);
  engine_options_ = options;
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
    engine_->reset_cancel();
    generating_ = true;
  }
  auto on_progress = [&](const h3::Progress& p) { observer_.progress(p); };
  // When the previous chunk's frames were taken into the queue: the next chunk's cycle starts
  // there (a wait for room in a full queue is the consumer's pace, not production).
  std::optional<std::chrono::steady_clock::time_point> taken;
  // The engine hands a chunk's frames over first and its soundtrack's stretch after (two
  // FrameChunks with the same index): each goes to its own queue as soon as it exists.
  auto on_chunk = [&](FrameChunk&& chunk) {
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
    taken = std::chrono::steady_clock::now();
    return pushed;
  };
  EngineFailure failure;
  const bool ok = engine_->generate(request_.clip, plan_, on_chunk, on_progress, &failure);
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
