// The engine (docs/engine.md): a model folder opened once across N ranks, serving many
// requests: conditioning -> seeded noise -> N - 1 Euler steps of the tensor-parallel DiT ->
// streaming VAE decode into a ChunkSink. Threading and collective agreement: docs/engine.md.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "engine/model/model.h"
#include "engine/planning/plan.h"
#include "h3/causal_held.h"
#include "h3/options.h"
#include "h3/progress.h"
#include "h3/request.h"
#include "vae/chunk_sink.h"

namespace h3 {

struct MemoryEstimate;  // engine/planning/memory_guard.h

// Rank 0's loaded weights, bytes by dtype (c10's names: "Float", "BFloat16"): what the compute
// dtype made of the checkpoint (under bf16 the DiT's 12 patch, time and head tensors stay fp32).
struct ResidentWeights {
  std::map<std::string, int64_t> transformer;   // this rank's shards
  std::map<std::string, int64_t> text_encoder;  // empty for a model without one
};

// The installed default model (H3_DEFAULT_MODEL_DIR: the trained tiny model), or the source tree's
// data/default when running uninstalled; the environment variable H3_MODEL_DIR overrides both.
std::string default_model_dir();

// The fit planner's verdict (engine/planning/fit_plan.h) on `req` for an engine opened with `opts`, from
// the configs alone, before anything is loaded: throws h3::Error(kOutOfMemory) when opts' tp x sp
// layout cannot fit each rank's device memory (opts.device_memory; on cuda with 0, the GPU's),
// naming what it needs and the layouts of these ranks that would fit, or the device memory the
// leanest one needs. Does nothing on cpu without device_memory (the memory guard then counts the
// host's memory per request). Throws as read_model and make_plan do for a bad folder or request.
void check_fit(const EngineOptions& opts, const GenerationRequest& req);

// Whether the model an engine opened with `opts` would read serves the task `ask` asks for
// (model.h check_task), from its configs and safetensors headers alone: called before any picture
// is decoded, so that a model without FL2VA's or Ref2VA's condition path refuses first. Throws
// h3::Error as check_task and read_model do. Returns the model's default clip length in frames
// (ModelDefaults::num_frames), what a request that leaves num_frames at 0 makes and so what its
// video references are read for (dit::reference_read_seconds); 0 for a T2VA ask (no picture),
// for which the model is not read.
int64_t check_task(const EngineOptions& opts, const TaskAsk& ask);

// Beyond the contract: observers the command line and the tests use.
struct GenerateExtras {
  // The final latents, before decoding: video [1, 24, T, h, w], audio [2A, 32], fp32 CPU.
  // Called on the calling thread; a throw fails the request on every rank.
  std::function<void(const at::Tensor& video, const at::Tensor& audio)> on_latents;
  // A causal request: what rank 0 holds after each chunk it synthesised (h3/causal_held.h),
  // called on the calling thread in chunk order; what it throws is ignored (an observer).
  std::function<void(const CausalHeld&)> on_causal_chunk;
};

// A rank >= 1 of a process world: what `h3 worker` runs (docs/distributed.md).
struct WorkerOptions {
  std::string model_dir;   // the same model as rank 0's (checked at admission)
  std::string rendezvous;  // rank 0's host:port
  int world_size = 2;
  int rank = 1;
  std::string token_file;
  std::string device = "cpu";  // "cpu" (Gloo) or "cuda" (NCCL)
  int cuda_device = 0;         // device == "cuda": this process's GPU
  std::string compute_dtype;   // "fp32" or "bf16"; empty: the device's default (must be rank 0's)
  int sp = 1;                  // the DiT's Ulysses degree (must be rank 0's)
  bool ref2va = false;         // Ref2VA's DiT (EngineOptions::ref2va; must be rank 0's)
  // The most a request may take in this process beside its weights (checked at each request, the
  // ranks agreeing before any work); 0: what this host has available.
  int64_t max_memory = 0;
  // This process's intra-op threads; 0: the cores it may use (affinity, cgroup limit) shared
  // among the world's ranks on them, chosen each time the world forms (engine/process/rank_threads.h).
  int threads = 0;
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};  // joining, and every collective
};

// Joins rank 0 through its door (admission/door.h), loads this rank's shards and serves rank 0's
// requests through the same agreed collectives as thread ranks; when the world breaks (a rank
// lost), joins again at rank 0's next formation. Returns when rank 0 says stop. Throws
// h3::Error: refused (wrong token, different model or settings), rank 0 never appeared within
// the timeout or went away, this rank's shards failed to load.
void run_worker(const WorkerOptions& opts);

class Engine {
 public:
  // Loads each rank's shards once. Throws h3::Error (kNotFound for a missing dir/file, kFormat,
  // kMismatch for configs disagreeing with weights, kInvalidArgument for ranks/tp/device).
  // Loading progress is reported on the calling thread.
  static std::unique_ptr<Engine> open(const EngineOptions& opts, const ProgressFn& progress = {});
  ~Engine();  // joins rank threads
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates the request and plans it; refuses one whose estimated memory exceeds
  // options().max_memory or, when that is 0, what the machine has available (kOutOfMemory).
  ClipPlan plan(const GenerationRequest& req) const;
  // The memory a planned request takes in this process beside the weights (engine/planning/memory_guard.h).
  MemoryEstimate memory_estimate(const ClipPlan& plan) const;

  // conditioning -> noise -> denoise -> streaming decode. Blocks the calling thread until done.
  // The sink's on_chunk runs on the calling thread, in order; it may block (back-pressure).
  // With req.audio, each chunk's frames come first and its soundtrack's stretch after, as a
  // chunk of the same index without frames (vae/chunk_sink.h).
  // Cancel is agreed across ranks at step and chunk boundaries; a cancelled request throws
  // h3::Error(kCancelled). A throwing sink stops all ranks at the next chunk boundary and its
  // error is rethrown here. Peers' failures come back as h3::Error(kDistributed) naming the rank.
  // Many requests at a time: concurrent calls are streams of their own, interleaved on the same
  // ranks (docs/engine.md, "Many streams"); one that would not fit in memory beside the running
  // ones is refused with kOutOfMemory and the numbers, and they go on.
  void generate(const GenerationRequest& req, ChunkSink& sink, const ProgressFn& progress,
                StreamControl& cancel);
  void generate(const GenerationRequest& req, ChunkSink& sink, const ProgressFn& progress,
                StreamControl& cancel, const GenerateExtras& extras);
  // The same with the plan plan(req) returned for this request, so that it is not planned (and
  // its memory estimated) again: the GStreamer elements plan at start and generate after each
  // flush. A plan whose size, length or steps contradict `req` is h3::Error(kInternal). The one
  // that runs: the two above plan and come here, and so does h3::Generator::generate (the public
  // API's single entry, include/h3/generator.h), with its plan and observers together.
  void generate(const GenerationRequest& req, const ClipPlan& planned, ChunkSink& sink,
                const ProgressFn& progress, StreamControl& cancel, const GenerateExtras& extras = {});

  // The decode half of generate() on given final latents (video [1, C, plan.latent_frames,
  // canvas_h / 16, canvas_w / 16]): the same ranks, sink hand-over, trim and crop. Only the plan's
  // width, height and num_frames are read (the rest is derived again from them).
  void decode(const at::Tensor& video_latents, const ClipPlan& plan, ChunkSink& sink,
              const ProgressFn& progress, StreamControl& cancel);

  const ModelInfo& model() const;
  const EngineOptions& options() const;
  // options().compute_dtype resolved for the device: "fp32" or "bf16".
  const std::string& compute_dtype() const;
  double load_seconds() const;  // wall time open() spent loading
  // generate() and decode() calls in flight now (thread-safe; docs/engine.md, "Many streams").
  int requests_in_flight() const;
  const ResidentWeights& resident_weights() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace h3
