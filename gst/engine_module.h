// The boundary between the GStreamer plugin (libgsth3.so, GStreamer only) and
// the engine module (libgsth3-engine.so, which links libh3core and LibTorch).
//
// Why a module: a plugin that links LibTorch makes every registry scan and
// every gst-inspect/gst-launch pay for loading it (~0.7 s, ~160 MB even for a
// CPU LibTorch), and a broken CUDA install would get the whole plugin
// blacklisted. The plugin opens the module with GModule when the element
// starts, so plugin_init stays cheap.
//
// Both sides are built by this project with the same compiler and C++ library,
// so plain C++ types cross the boundary; exceptions do not: every entry point
// reports failure through a Failure value. kEngineModuleAbi guards against a
// plugin and a module from different builds.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "frame_queue.h"

namespace h3gst {

constexpr int kEngineModuleAbi = 1;
constexpr const char* kEngineModuleSymbol = "h3gst_engine_module";
constexpr const char* kEngineModuleFile = "libgsth3-engine.so";

// Mirrors h3::ErrorKind (core/common/error.h) so that the plugin can choose a
// GStreamer error domain without linking the engine.
enum class FailureKind {
  kInvalidArgument,
  kNotFound,
  kFormat,
  kMismatch,
  kDistributed,
  kCancelled,
  kCallback,
  kInternal,
};
inline const char* to_string(FailureKind kind) {
  switch (kind) {
    case FailureKind::kInvalidArgument: return "invalid argument";
    case FailureKind::kNotFound: return "not found";
    case FailureKind::kFormat: return "format";
    case FailureKind::kMismatch: return "mismatch";
    case FailureKind::kDistributed: return "distributed";
    case FailureKind::kCancelled: return "cancelled";
    case FailureKind::kCallback: return "callback";
    case FailureKind::kInternal: return "internal";
  }
  return "internal";
}

struct Failure {
  FailureKind kind = FailureKind::kInternal;
  std::string message;
};

// h3::EngineOptions
struct EngineSettings {
  std::string model_dir;  // empty: the engine's default (the installed tiny model)
  int ranks = 1;
  int tp = 0;
  std::string device = "cpu";
  int64_t timeout_ms = 120000;
};

// h3::GenerationRequest; 0 means the model's default, as in the engine.
struct ClipRequest {
  std::string prompt;
  std::string embeds_path;
  int64_t width = 0, height = 0, num_frames = 0, steps = 0;
  uint64_t seed = 0;
};

// h3::ClipPlan
struct ClipInfo {
  int64_t width = 0, height = 0, num_frames = 0;
  int64_t canvas_width = 0, canvas_height = 0;
  int64_t latent_frames = 0, total_chunks = 0, steps = 0;
  int fps_n = 24, fps_d = 1;
};

// h3::Progress, with the phase as h3::to_string(Phase) gives it.
struct ProgressInfo {
  std::string phase;
  int64_t step = 0, total_steps = 0;
  int64_t chunk = 0, total_chunks = 0;
  int64_t frames = 0, total_frames = 0;
  double elapsed_s = 0;
};

using ProgressCallback = std::function<void(const ProgressInfo&)>;
// Receives each decoded chunk on rank 0's thread; may block (back-pressure).
// Returning false stops the request (the consumer has gone away).
using ChunkCallback = std::function<bool(FrameChunk&&)>;

class EngineHandle {
 public:
  virtual ~EngineHandle() = default;
  virtual const std::string& model_dir() const = 0;
  // What `req` will produce; false with `failure` set when the request is invalid.
  virtual bool plan(const ClipRequest& req, ClipInfo* info, Failure* failure) const = 0;
  // Runs the whole request on the calling thread. A cancelled request returns
  // false with kCancelled.
  virtual bool generate(const ClipRequest& req, const ChunkCallback& on_chunk,
                        const ProgressCallback& on_progress, Failure* failure) = 0;
  // Thread-safe: asks the running request (or the next one) to stop at the next
  // step or chunk boundary, agreed across ranks.
  virtual void cancel() = 0;
  // Clears a cancel request before a new generate().
  virtual void reset_cancel() = 0;
};

struct EngineModule {
  int abi;
  // The model folder an empty EngineSettings::model_dir stands for.
  std::string (*default_model_dir)();
  // Opens the engine (loads every rank's shards); nullptr with `failure` set on error.
  EngineHandle* (*open)(const EngineSettings& settings, const ProgressCallback& on_progress,
                        Failure* failure);
};

}  // namespace h3gst

// The module's only exported symbol (kEngineModuleSymbol).
extern "C" const h3gst::EngineModule* h3gst_engine_module(void);
