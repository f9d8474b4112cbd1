// The boundary between the GStreamer plugin (libgsth3.so, GStreamer only) and
// the engine module (libgsth3-engine.so, which links libh3core and LibTorch).
// Both include this folder; nothing in it includes LibTorch or GStreamer.
//
// Why a module: a plugin that links LibTorch makes every registry scan and
// every gst-inspect/gst-launch pay for loading it (~0.7 s, ~160 MB even for a
// CPU LibTorch), and a broken CUDA install would get the whole plugin
// blacklisted. The plugin opens the module with GModule when the element
// starts, so plugin_init stays cheap.
//
// Both sides are built by this project with the same compiler and C++ library,
// so plain C++ types cross the boundary: core's torch-free request, plan,
// options and progress types (h3types, core/meson.build) as they are. Exceptions
// do not cross: every entry point reports failure through a EngineFailure value.
// kEngineModuleAbi guards against a plugin and a module from different builds.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "boundary/engine_failure.h"
#include "engine/model/task_ask.h"
#include "h3/frame_chunk.h"
#include "h3/options.h"
#include "h3/progress.h"
#include "h3/request.h"

namespace h3gst {

// 12: check_task gives the model's default frames; 13: one engine, many streams
// (EngineHandle::open_stream, EngineStream, engines_opened); 14: Progress::prompt (the prompt a
// kPrompt report took, for the stream's marking); 15: EngineStream::change_steps, Phase::kSteps,
// Progress::chunk_steps, GenerationRequest::min_steps (a live stream keeping pace)
constexpr int kEngineModuleAbi = 15;
constexpr const char* kEngineModuleSymbol = "h3gst_engine_module";
constexpr const char* kEngineModuleFile = "libgsth3-engine.so";

// Receives each decoded chunk (with its audio when the request asked for it) on the thread that called
// generate(); may block (back-pressure). Returning false stops the request: the consumer has gone away, and
// generate() reports kCancelled.
using ChunkCallback = std::function<bool(h3::FrameChunk&&)>;

// One stream's hold on an engine it shares with others (docs/element.md, "One engine, many
// elements"): its requests, and its own cancel, finish and prompt changes, which touch no other
// stream of the engine. Several streams generate on one engine at once.
class EngineStream {
 public:
  virtual ~EngineStream() = default;
  // Runs the whole request on the calling thread, with the plan EngineHandle::plan() gave for it
  // (the engine does not plan it again). A cancelled request, or one whose ChunkCallback returned
  // false, returns false with kCancelled. A request that would not fit in memory beside the ones
  // running returns false with kOutOfMemory, and they go on.
  virtual bool generate(const h3::GenerationRequest& req, const h3::ClipPlan& plan,
                        const ChunkCallback& on_chunk, const h3::ProgressFn& on_progress,
                        EngineFailure* failure) = 0;
  // Thread-safe: asks this stream's running request (or its next one) to stop at the next
  // step or chunk boundary, agreed across ranks.
  virtual void cancel() = 0;
  // Clears a cancel request (and a finish or a prompt change) before a new generate().
  virtual void reset_cancel() = 0;
  // Thread-safe: ends this stream's running endless request at its next chunk boundary, every
  // whole chunk and the soundtrack up to it delivered; generate() then returns true
  // (docs/causal.md "Live").
  virtual void finish() = 0;
  // Thread-safe: a new prompt for this stream's running causal request, from its first chunk that
  // starts at or after `at_seconds` into the stream (0: the next chunk).
  virtual void change_prompt(const std::string& prompt, double at_seconds) = 0;
  // Thread-safe: new forwards per chunk for this stream's running causal request from its next
  // chunk boundary (h3::StreamControl::change_steps).
  virtual void change_steps(int64_t steps) = 0;
};

// An open engine: its ranks and loaded weights, shared by every stream opened on it.
class EngineHandle {
 public:
  virtual ~EngineHandle() = default;  // joins the ranks: every stream's generate() has returned
  // What `req` will produce; false with `failure` set when the request is invalid.
  virtual bool plan(const h3::GenerationRequest& req, h3::ClipPlan* plan, EngineFailure* failure) const = 0;
  // A new stream on this engine, owned by the caller; destroy it before the engine.
  virtual EngineStream* open_stream() = 0;
  // Requests running on the engine now (thread-safe).
  virtual int requests_in_flight() const = 0;
};

struct EngineModule {
  int abi;
  // The model folder an empty EngineOptions::model_dir stands for.
  std::string (*default_model_dir)();
  // The fit planner's verdict on `request` for an engine opened with `options` (h3::check_fit),
  // before anything is loaded; false with `failure` set when it cannot fit.
  bool (*fit)(const h3::EngineOptions& options, const h3::GenerationRequest& request, EngineFailure* failure);
  // Whether the model an engine opened with `options` would read serves what `ask` asks for
  // (h3::check_task: FL2VA's or Ref2VA's condition path), from its configs and headers alone: the
  // element asks before it decodes any picture; false with `failure` set when it does not. Sets
  // `default_frames` to the model's default clip length, what the element reads a video
  // reference for when num-frames is the model's (0 when `ask` holds no picture).
  bool (*check_task)(const h3::EngineOptions& options, const h3::TaskAsk& ask, int64_t* default_frames,
                     EngineFailure* failure);
  // Opens the engine (loads every rank's shards); nullptr with `failure` set on error.
  EngineHandle* (*open)(const h3::EngineOptions& options, const h3::ProgressFn& on_progress,
                        EngineFailure* failure);
  // Engines this module opened in this process so far (each a load of the model).
  int64_t (*engines_opened)();
};

}  // namespace h3gst

// The module's only exported symbol (kEngineModuleSymbol).
extern "C" const h3gst::EngineModule* h3gst_engine_module(void);
