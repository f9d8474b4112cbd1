// The engine module (libgsth3-engine.so): h3::Engine behind the plain C++
// boundary of gst/engine_module.h. Every exception becomes a Failure here; the
// plugin never sees LibTorch or h3 types.
#include "engine_module.h"

#include <ATen/ATen.h>

#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/progress.h"
#include "engine/request.h"
#include "vae/chunk_sink.h"

namespace {

h3gst::FailureKind kind_of(h3::ErrorKind k) {
  switch (k) {
    case h3::ErrorKind::kInvalidArgument: return h3gst::FailureKind::kInvalidArgument;
    case h3::ErrorKind::kNotFound: return h3gst::FailureKind::kNotFound;
    case h3::ErrorKind::kFormat: return h3gst::FailureKind::kFormat;
    case h3::ErrorKind::kMismatch: return h3gst::FailureKind::kMismatch;
    case h3::ErrorKind::kDistributed: return h3gst::FailureKind::kDistributed;
    case h3::ErrorKind::kCancelled: return h3gst::FailureKind::kCancelled;
    case h3::ErrorKind::kCallback: return h3gst::FailureKind::kCallback;
    case h3::ErrorKind::kInternal: return h3gst::FailureKind::kInternal;
  }
  return h3gst::FailureKind::kInternal;
}

// Call from a catch block only.
void describe_current_exception(h3gst::Failure* f) {
  try {
    throw;
  } catch (const h3::Error& e) {
    f->kind = kind_of(e.kind());
    f->message = e.what();
  } catch (const std::exception& e) {
    f->kind = h3gst::FailureKind::kInternal;
    f->message = e.what();
  } catch (...) {
    f->kind = h3gst::FailureKind::kInternal;
    f->message = "unknown exception in the H3 engine";
  }
}

h3::GenerationRequest to_request(const h3gst::ClipRequest& r) {
  h3::GenerationRequest g;
  g.prompt = r.prompt;
  g.embeds_path = r.embeds_path;
  g.width = r.width;
  g.height = r.height;
  g.num_frames = r.num_frames;
  g.steps = r.steps;
  g.seed = r.seed;
  return g;
}

h3gst::ProgressInfo to_info(const h3::Progress& p) {
  h3gst::ProgressInfo i;
  i.phase = h3::to_string(p.phase);
  i.step = p.step;
  i.total_steps = p.total_steps;
  i.chunk = p.chunk;
  i.total_chunks = p.total_chunks;
  i.frames = p.frames;
  i.total_frames = p.total_frames;
  i.elapsed_s = p.elapsed_s;
  return i;
}

h3::ProgressFn wrap(const h3gst::ProgressCallback& cb) {
  if (!cb) return {};
  return [cb](const h3::Progress& p) { cb(to_info(p)); };
}

// Hands each chunk to the element's queue without copying: the decoder gives
// every chunk fresh tensors and drops its own references when on_chunk returns
// (core/vae/chunk_sink.h), so the queue keeps the tensor alive instead.
class QueueSink : public h3::ChunkSink {
 public:
  explicit QueueSink(const h3gst::ChunkCallback& cb) : cb_(cb) {}
  void on_chunk(const h3::Chunk& c) override {
    at::Tensor t = c.frames.to(at::kCPU).contiguous();
    if (t.scalar_type() != at::kByte || t.dim() != 4 || t.size(3) != 3) {
      throw h3::Error(h3::ErrorKind::kInternal,
                      "chunk " + std::to_string(c.index) + " is not uint8 [n, H, W, 3] RGB frames");
    }
    h3gst::FrameChunk fc;
    fc.index = c.index;
    fc.first_frame = c.first_frame;
    fc.count = t.size(0);
    fc.height = t.size(1);
    fc.width = t.size(2);
    fc.final = c.final;
    const uint8_t* data = t.data_ptr<uint8_t>();
    fc.pixels =
        std::shared_ptr<const uint8_t>(data, [keep = std::move(t)](const uint8_t*) mutable { keep.reset(); });
    if (!cb_(std::move(fc))) {
      stopped_ = true;
      throw h3::Error(h3::ErrorKind::kCancelled, "the GStreamer element stopped taking frames");
    }
  }
  // The consumer went away: whatever error the engine reports for the sink's
  // exception, the request was cancelled.
  bool stopped() const { return stopped_; }

 private:
  const h3gst::ChunkCallback& cb_;
  bool stopped_ = false;
};

class Handle : public h3gst::EngineHandle {
 public:
  Handle(std::unique_ptr<h3::Engine> engine, std::string dir)
      : engine_(std::move(engine)), dir_(std::move(dir)) {}

  const std::string& model_dir() const override { return dir_; }

  bool plan(const h3gst::ClipRequest& req, h3gst::ClipInfo* info, h3gst::Failure* failure) const override {
    try {
      const h3::ClipPlan p = engine_->plan(to_request(req));
      info->width = p.width;
      info->height = p.height;
      info->num_frames = p.num_frames;
      info->canvas_width = p.canvas_width;
      info->canvas_height = p.canvas_height;
      info->latent_frames = p.latent_frames;
      info->total_chunks = p.total_chunks;
      info->steps = p.steps;
      info->fps_n = p.fps_n;
      info->fps_d = p.fps_d;
      return true;
    } catch (...) {
      describe_current_exception(failure);
      return false;
    }
  }

  bool generate(const h3gst::ClipRequest& req, const h3gst::ChunkCallback& on_chunk,
                const h3gst::ProgressCallback& on_progress, h3gst::Failure* failure) override {
    QueueSink sink(on_chunk);
    try {
      engine_->generate(to_request(req), sink, wrap(on_progress), cancel_);
      return true;
    } catch (...) {
      describe_current_exception(failure);
      if (sink.stopped()) failure->kind = h3gst::FailureKind::kCancelled;
      return false;
    }
  }

  void cancel() override { cancel_.cancel(); }
  void reset_cancel() override { cancel_.reset(); }

 private:
  std::unique_ptr<h3::Engine> engine_;
  std::string dir_;
  h3::CancelToken cancel_;
};

std::string default_dir() {
  try {
    return h3::default_model_dir();
  } catch (...) {
    return {};
  }
}

h3gst::EngineHandle* open_engine(const h3gst::EngineSettings& s, const h3gst::ProgressCallback& on_progress,
                                 h3gst::Failure* failure) {
  try {
    h3::EngineOptions o;
    o.model_dir = s.model_dir.empty() ? h3::default_model_dir() : s.model_dir;
    o.ranks = s.ranks;
    o.tp = s.tp;
    o.device = s.device;
    o.timeout = std::chrono::milliseconds(s.timeout_ms);
    return new Handle(h3::Engine::open(o, wrap(on_progress)), o.model_dir);
  } catch (...) {
    describe_current_exception(failure);
    return nullptr;
  }
}

const h3gst::EngineModule kModule = {h3gst::kEngineModuleAbi, &default_dir, &open_engine};

}  // namespace

extern "C" __attribute__((visibility("default"))) const h3gst::EngineModule* h3gst_engine_module(void) {
  return &kModule;
}
