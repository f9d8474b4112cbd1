// The engine module (libgsth3-engine.so): h3::Engine behind the plain C++
// boundary of boundary/engine_module.h. Every exception becomes a EngineFailure here;
// the plugin never sees LibTorch.
#include "boundary/engine_module.h"

#include <atomic>
#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "api/callback_sink.h"
#include "engine/engine.h"
#include "h3/error.h"

namespace {

// Call from a catch block only.
h3gst::EngineFailure current_failure() {
  try {
    throw;
  } catch (const h3::Error& e) {
    return {e.kind(), e.what()};
  } catch (const std::exception& e) {
    return {h3::ErrorKind::kInternal, e.what()};
  } catch (...) {
    return {h3::ErrorKind::kInternal, "unknown exception in the H3 engine"};
  }
}

// Engines opened in this process (each a load of the model), for the elements' tests and logs.
std::atomic<int64_t> g_engines_opened{0};

// One stream on a shared engine: its own token, so that its cancel, finish and prompt changes
// reach its own requests only.
class Stream : public h3gst::EngineStream {
 public:
  explicit Stream(h3::Engine& engine) : engine_(engine) {}

  bool generate(const h3::GenerationRequest& req, const h3::ClipPlan& plan,
                const h3gst::ChunkCallback& on_chunk, const h3::ProgressFn& on_progress,
                h3gst::EngineFailure* failure) override {
    // Each chunk to the element's queues without a copy (core/api/callback_sink.h).
    h3::CallbackSink sink(on_chunk, plan.audio_rate, "the GStreamer element");
    try {
      engine_.generate(req, plan, sink, on_progress, cancel_);
      return true;
    } catch (...) {
      *failure = current_failure();
      if (sink.stopped()) failure->kind = h3::ErrorKind::kCancelled;
      return false;
    }
  }

  void cancel() override { cancel_.cancel(); }
  void reset_cancel() override { cancel_.reset(); }
  void finish() override { cancel_.finish(); }
  void change_prompt(const std::string& prompt, double at_seconds) override {
    cancel_.change_prompt(prompt, at_seconds);
  }
  void change_steps(int64_t steps) override { cancel_.change_steps(steps); }

 private:
  h3::Engine& engine_;
  h3::StreamControl cancel_;
};

class Handle : public h3gst::EngineHandle {
 public:
  explicit Handle(std::unique_ptr<h3::Engine> engine) : engine_(std::move(engine)) {}

  bool plan(const h3::GenerationRequest& req, h3::ClipPlan* plan,
            h3gst::EngineFailure* failure) const override {
    try {
      *plan = engine_->plan(req);
      return true;
    } catch (...) {
      *failure = current_failure();
      return false;
    }
  }

  h3gst::EngineStream* open_stream() override { return new Stream(*engine_); }
  int requests_in_flight() const override { return engine_->requests_in_flight(); }

 private:
  std::unique_ptr<h3::Engine> engine_;
};

std::string default_dir() {
  try {
    return h3::default_model_dir();
  } catch (...) {
    return {};
  }
}

h3gst::EngineHandle* open_engine(const h3::EngineOptions& options, const h3::ProgressFn& on_progress,
                                 h3gst::EngineFailure* failure) {
  try {
    h3::EngineOptions o = options;
    if (o.model_dir.empty()) o.model_dir = h3::default_model_dir();
    auto* handle = new Handle(h3::Engine::open(o, on_progress));
    ++g_engines_opened;
    return handle;
  } catch (...) {
    *failure = current_failure();
    return nullptr;
  }
}

bool fit(const h3::EngineOptions& options, const h3::GenerationRequest& request,
         h3gst::EngineFailure* failure) {
  try {
    h3::EngineOptions o = options;
    if (o.model_dir.empty()) o.model_dir = h3::default_model_dir();
    h3::check_fit(o, request);
    return true;
  } catch (...) {
    *failure = current_failure();
    return false;
  }
}

bool check_task(const h3::EngineOptions& options, const h3::TaskAsk& ask, int64_t* default_frames,
                h3gst::EngineFailure* failure) {
  try {
    h3::EngineOptions o = options;
    if (o.model_dir.empty()) o.model_dir = h3::default_model_dir();
    *default_frames = h3::check_task(o, ask);
    return true;
  } catch (...) {
    *failure = current_failure();
    return false;
  }
}

int64_t engines_opened() {
  return g_engines_opened.load();
}

const h3gst::EngineModule kModule = {h3gst::kEngineModuleAbi, &default_dir, &fit, &check_task, &open_engine,
                                     &engines_opened};

}  // namespace

extern "C" __attribute__((visibility("default"))) const h3gst::EngineModule* h3gst_engine_module(void) {
  return &kModule;
}
