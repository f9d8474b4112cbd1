// The engine module (libgsth3-engine.so): h3::Engine behind the plain C++
// boundary of boundary/engine_module.h. Every exception becomes a EngineFailure here;
// the plugin never sees LibTorch.
#include "boundary/engine_module.h"

#include <ATen/core/Tensor.h>

#include <atomic>
#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "engine/engine.h"
#include "h3/error.h"
#include "vae/chunk_sink.h"

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

// The chunk's soundtrack stretch ([n, 2] f32, interleaved), kept alive by its samples' owner.
h3gst::AudioChunk audio_chunk(const h3::Chunk& c, int64_t rate) {
  at::Tensor a = c.audio.to(at::kCPU).contiguous();
  if (a.scalar_type() != at::kFloat || a.dim() != 2 || a.size(1) != 2) {
    throw h3::Error(h3::ErrorKind::kInternal,
                    "chunk " + std::to_string(c.index) + "'s audio is not f32 [n, 2] interleaved samples");
  }
  h3gst::AudioChunk ac;
  ac.first_sample = c.first_sample;
  ac.count = a.size(0);
  ac.channels = 2;
  ac.rate = static_cast<int>(rate);
  const float* data = a.data_ptr<float>();
  ac.samples =
      std::shared_ptr<const float>(data, [keep = std::move(a)](const float*) mutable { keep.reset(); });
  return ac;
}

// Hands each chunk to the element's queue without copying: the decoder gives
// every chunk fresh tensors and drops its own references when on_chunk returns
// (core/vae/chunk_sink.h), so the queue keeps the tensor alive instead.
class QueueSink : public h3::ChunkSink {
 public:
  QueueSink(const h3gst::ChunkCallback& cb, int64_t audio_rate) : cb_(cb), audio_rate_(audio_rate) {}
  void on_chunk(const h3::Chunk& c) override {
    h3gst::FrameChunk fc;
    fc.index = c.index;
    fc.first_frame = c.first_frame;
    if (c.frames.defined()) add_frames(c, fc);
    if (c.audio.defined()) fc.audio = audio_chunk(c, audio_rate_);
    if (!cb_(std::move(fc))) {
      stopped_ = true;
      throw h3::Error(h3::ErrorKind::kCancelled, "the GStreamer element stopped taking frames");
    }
  }
  // The consumer went away: whatever error the engine reports for the sink's
  // exception, the request was cancelled.
  bool stopped() const { return stopped_; }

 private:
  static void add_frames(const h3::Chunk& c, h3gst::FrameChunk& fc) {
    at::Tensor t = c.frames.to(at::kCPU).contiguous();
    if (t.scalar_type() != at::kByte || t.dim() != 4 || t.size(3) != 3) {
      throw h3::Error(h3::ErrorKind::kInternal,
                      "chunk " + std::to_string(c.index) + " is not uint8 [n, H, W, 3] RGB frames");
    }
    fc.count = t.size(0);
    fc.height = t.size(1);
    fc.width = t.size(2);
    const uint8_t* data = t.data_ptr<uint8_t>();
    fc.pixels =
        std::shared_ptr<const uint8_t>(data, [keep = std::move(t)](const uint8_t*) mutable { keep.reset(); });
    fc.decode_ns = c.decode_ns;
  }

  const h3gst::ChunkCallback& cb_;
  const int64_t audio_rate_;
  bool stopped_ = false;
};

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
    QueueSink sink(on_chunk, plan.audio_rate);
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
