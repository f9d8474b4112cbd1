// The engine as an application embeds it (docs/engine.md, "Embedding the engine"): a model opened
// once on its ranks, and generate() with everything a request needs in one call. Torch-free: an
// application includes the headers of this folder and links libh3-engine (`pkg-config --cflags
// --libs h3-engine`); LibTorch stays inside the library. C++17, the same compiler family and C++
// library as the build (the types below cross the library's boundary as they are).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "h3/causal_held.h"
#include "h3/error.h"
#include "h3/export.h"
#include "h3/frame_chunk.h"
#include "h3/options.h"
#include "h3/progress.h"
#include "h3/request.h"

namespace h3 {

// A request's final latents before decoding (GenerateCall::on_latents), copied out of the engine:
// fp32, row-major, shapes as the engine holds them.
struct Latents {
  std::vector<int64_t> video_shape;  // [1, channels, latent frames, height / 16, width / 16]
  std::vector<float> video;
  std::vector<int64_t> audio_shape;  // [2 x audio latents, channels]; empty without audio
  std::vector<float> audio;
};

// Everything one Generator::generate() takes beside the request. Only on_chunk is required.
struct GenerateCall {
  // Each decoded chunk in clip order, on the thread that called generate(); it may block
  // (back-pressure). With request.audio, a chunk's soundtrack stretch follows its frames as a
  // FrameChunk of the same index with count 0. Returning false stops the request: generate()
  // then throws h3::Error(kCancelled).
  std::function<bool(FrameChunk&&)> on_chunk;
  // The plan Generator::plan() gave for this very request, so that it is not planned (and its
  // memory estimated) again; nullptr: generate() plans it. A plan that contradicts the
  // request's size, length or steps is refused (kInternal).
  const ClipPlan* plan = nullptr;
  // Loading aside, every report of the request (conditioning, each step, each chunk, prompt
  // changes as Phase::kPrompt, done), on the calling thread.
  ProgressFn on_progress;
  // The caller's hold on the running request from other threads: cancel, finish an endless
  // stream, change a causal stream's prompt (h3/progress.h). nullptr: none.
  StreamControl* control = nullptr;
  // Observers, on the calling thread: the final latents (before the decode; a throw fails the
  // request), and a causal request's held memory after each chunk (what it throws is ignored).
  std::function<void(const Latents&)> on_latents;
  std::function<void(const CausalHeld&)> on_causal_chunk;
};

class H3_API Generator {
 public:
  // Loads the model on every rank once (options.model_dir empty: default_model_dir()). Throws
  // h3::Error: kNotFound for a missing folder or file, kFormat, kMismatch, kInvalidArgument for
  // ranks, tp, sp or device. Loading progress is reported on the calling thread.
  static std::unique_ptr<Generator> open(const EngineOptions& options, const ProgressFn& on_progress = {});
  // $H3_MODEL_DIR, else the installed default model, else the source tree's (running uninstalled).
  static std::string default_model_dir();
  ~Generator();  // joins the ranks: every generate() must have returned
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Validates and plans `request` (zeros resolved to the model's defaults): what generate() will
  // deliver. Throws h3::Error (kInvalidArgument naming the field, kOutOfMemory with the numbers).
  ClipPlan plan(const GenerationRequest& request) const;
  // Runs the whole request on the calling thread: conditioning, denoising, the streaming decode
  // into call.on_chunk. Several threads may generate at once: each call is a stream of its own
  // on the same ranks (docs/engine.md, "Many streams"). Throws h3::Error: kCancelled (cancelled
  // through call.control, or on_chunk returned false), kCallback (an observer or on_chunk
  // threw), kDistributed naming the rank, kOutOfMemory beside the streams running.
  void generate(const GenerationRequest& request, const GenerateCall& call);

  const EngineOptions& options() const;  // as opened, model_dir resolved
  int requests_in_flight() const;        // generate() calls running now (thread-safe)

 private:
  struct Impl;
  explicit Generator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace h3
