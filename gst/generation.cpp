#include "generation.h"

#include <gst/gst.h>

#include <utility>

#include "engine_loader.h"

GST_DEBUG_CATEGORY_EXTERN(gst_h3_video_src_debug);
#define GST_CAT_DEFAULT gst_h3_video_src_debug

namespace h3src {

using Clock = std::chrono::steady_clock;

Generation::Generation(Observer& observer) : observer_(observer) {}

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
  }
  queue_.reset();
  audio_queue_.reset();
}

void Generation::end() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (generating_) engine_->cancel();
  queue_.abort();
  audio_queue_.abort();
}

void Generation::cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!planned_) return;  // still starting: nothing generated yet
  restart_pending_ = true;
  if (generating_) engine_->cancel();
  queue_.abort();
  audio_queue_.abort();
}

void Generation::restart() {
  GST_DEBUG("restarting the request after a flush");
  if (worker_.joinable()) worker_.join();
  restart_pending_ = false;
  queue_.reset();
  audio_queue_.reset();
  worker_ = std::thread(&Generation::run, this);
}

FrameQueue::PopResult Generation::pop(Frame* frame, h3gst::Failure* failure) {
  return queue_.pop(frame, failure);
}

AudioQueue::PopResult Generation::pop_audio(AudioSlice* slice, int64_t max_samples, h3gst::Failure* failure) {
  return audio_queue_.pop(slice, max_samples, failure);
}

void Generation::worker_main() {
  std::string error, module_path;
  const h3gst::EngineModule* module = h3gst::load_engine_module(request_.plugin_dir, &error, &module_path);
  if (!module) {
    observer_.module_missing(error);
    complete_start(nullptr);
    return;
  }
  GST_DEBUG("engine module %s", module_path.c_str());
  h3gst::Failure failure;
  if (!open_engine(*module, &failure)) {
    fail_start(failure, "Could not open the H3 model");
    return;
  }
  h3::ClipPlan plan{};
  if (!engine_->plan(request_.clip, &plan, &failure)) {
    fail_start(failure, "The requested clip is not possible");
    return;
  }
  observer_.planned(plan);
  if (complete_start(&plan)) run();
}

bool Generation::open_engine(const h3gst::EngineModule& module, h3gst::Failure* failure) {
  h3::EngineOptions options = request_.engine;
  if (options.model_dir.empty()) options.model_dir = module.default_model_dir();
  if (engine_ && options == engine_options_) return true;
  engine_.reset();
  observer_.opening(options);
  h3gst::EngineHandle* handle = module.open(
      options, [this](const h3::Progress& p) { observer_.progress(p); }, failure);
  if (!handle) return false;
  engine_.reset(handle);
  engine_options_ = options;
  return true;
}

void Generation::fail_start(const h3gst::Failure& failure, const char* what) {
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
    if (stopping_) return;
    engine_->reset_cancel();
    generating_ = true;
  }
  Clock::time_point last = Clock::now();
  bool timing = false;  // decoding has begun
  h3::Progress latest{h3::Phase::kLoading};
  auto on_progress = [&](const h3::Progress& p) {
    if (!timing && p.phase == h3::Phase::kDecoding) {
      timing = true;
      last = Clock::now();
    }
    latest = p;
    observer_.progress(p);
  };
  auto on_chunk = [&](h3gst::FrameChunk&& chunk) {
    const auto now = Clock::now();
    if (timing) observer_.chunk_decoded(std::chrono::duration_cast<std::chrono::nanoseconds>(now - last));
    timing = true;
    GST_LOG("chunk %" G_GINT64_FORMAT ": %" G_GINT64_FORMAT " frames from %" G_GINT64_FORMAT
            ", %" G_GINT64_FORMAT " audio samples from %" G_GINT64_FORMAT,
            chunk.index, chunk.count, chunk.first_frame, chunk.audio.count, chunk.audio.first_sample);
    // The audio first: see audio_queue_.
    bool ok = chunk.audio.count == 0 || audio_queue_.push(std::move(chunk.audio));
    ok = ok && queue_.push(std::move(chunk));
    last = Clock::now();  // time spent waiting for downstream is not decode time
    return ok;
  };
  h3gst::Failure failure;
  const bool ok = engine_->generate(request_.clip, on_chunk, on_progress, &failure);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generating_ = false;
  }
  if (ok) {
    audio_queue_.finish();
    queue_.finish();
    // Applications wait for phase=done to know decoding is over: make sure it comes.
    if (latest.phase != h3::Phase::kDone) {
      latest.phase = h3::Phase::kDone;
      observer_.progress(latest);
    }
  } else if (failure.kind == h3::ErrorKind::kCancelled) {
    GST_DEBUG("request cancelled");
    queue_.abort();
    audio_queue_.abort();
  } else {
    GST_DEBUG("request failed: %s", failure.message.c_str());
    queue_.fail(failure);
    audio_queue_.fail(failure);
  }
}

}  // namespace h3src
