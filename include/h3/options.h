// How the engine is opened: the model folder, the ranks and where they compute. Torch-free:
// the GStreamer plugin hands these to the engine module (boundary/engine_module.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "h3/limits.h"

namespace h3 {

struct EngineOptions {
  std::string model_dir;  // release layout: model_index.json, transformer/, vae/ (+ tiny text table)
  int ranks = 1;          // ranks as threads in this process, kMinRanks..kMaxRanks
  // The DiT's 2-D layout over the world's ranks (every rank, a process world's included): tp
  // ranks split each layer's weights (tensor parallelism) and sp ranks split the rows (Ulysses
  // sequence parallelism); tp x sp = ranks. tp 0: ranks / sp. sp must divide each TP rank's
  // heads (dit::check_layout). The text encoder and the VAE use every rank as before.
  int tp = 0;
  int sp = 1;
  // "cpu" or "cuda": thread rank r on cuda:r, NCCL between them (a CUDA LibTorch and a GPU per rank).
  std::string device = "cpu";
  std::chrono::milliseconds timeout{kDefaultTimeout};  // every collective
  // Drop the text encoder's weights after each prompt is encoded and read them again for the
  // next prompt: the DiT and the VAE keep the memory (tens of GB for the release's 50 layers) at
  // the cost of a reload per prompt. Only a model with its own text encoder is affected; the
  // vision tower FL2VA loads is dropped with it.
  bool free_text_encoder = false;
  // Read Ref2VA's DiT (the diffusers layout's transformer_ref/) instead of transformer/: such an
  // engine serves requests with references (GenerationRequest::references), and only those; one
  // without serves T2VA and FL2VA. A native Ref2VA/ partition is Ref2VA's either way (its tasks).
  bool ref2va = false;
  // What the DiT's residual stream and block weights and the text encoder compute in: "fp32" or
  // "bf16"; empty: the device's default (fp32 on cpu, bf16 on cuda as released). The VAE and the
  // audio VAE stay fp32. bf16 halves the DiT's weight memory; it is fast only on a CPU with
  // AMX-BF16 or AVX-512-BF16 (elsewhere ATen emulates it: slower than fp32; docs/engine.md).
  std::string compute_dtype;
  // AdaLN tables (dit/adaln_tables.h): each request's AdaLN rows are computed once for its
  // timestep grid and the AdaLN projections leave memory (13.0 of the release's 33.1 B DiT
  // parameters); a request on another grid reads them again from the model folder first. The
  // output is bit for bit the same. Off: the projections stay and compute the rows every step.
  bool adaln_tables = true;
  // The most memory a request may take beside the loaded weights, in bytes; 0: what the machine
  // (or this process's cgroup) has available when the request is planned. A request whose
  // estimate exceeds it is refused before anything is allocated (engine/planning/memory_guard.h).
  int64_t max_memory = 0;
  // The memory of each rank's device, bytes, for the fit planner (engine/planning/fit_plan.h, check_fit):
  // a request whose tp x sp layout cannot fit it is refused before anything is loaded, naming a
  // layout that would fit. 0: on cuda the GPU's own memory; on cpu no device check (the memory
  // guard above counts the host's memory per request).
  int64_t device_memory = 0;

  // Ranks in other processes or on other hosts (docs/distributed.md). Empty: the ranks are
  // threads of this process (`ranks`). "host:port": this process is rank 0 of a world of
  // `world_size` ranks whose others are `h3 worker` processes; it serves the rendezvous store
  // on exactly that address (ranks must then stay 1).
  std::string rendezvous;
  int world_size = 0;      // with rendezvous: every rank, rank 0 included (>= 2)
  std::string token_file;  // with rendezvous: the shared token, in a file only its owner may read

  bool operator==(const EngineOptions& o) const {
    return model_dir == o.model_dir && ranks == o.ranks && tp == o.tp && sp == o.sp && device == o.device &&
           timeout == o.timeout && free_text_encoder == o.free_text_encoder &&
           compute_dtype == o.compute_dtype && ref2va == o.ref2va && adaln_tables == o.adaln_tables &&
           max_memory == o.max_memory && device_memory == o.device_memory && rendezvous == o.rendezvous &&
           world_size == o.world_size && token_file == o.token_file;
  }
  bool operator!=(const EngineOptions& o) const { return !(*this == o); }
};

}  // namespace h3
