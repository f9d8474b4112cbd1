// The memory a request will take, estimated from its plan before anything is allocated, and the
// refusal of a request that cannot fit (docs/engine.md, "Memory guard"). A request inside every
// property's range (4096x4096, 1024 frames) can need far more than a machine has; without this
// it grows until the kernel's OOM killer ends the process, and other processes with it.
#pragma once

#include <cstdint>
#include <string>

#include "engine/model/model.h"
#include "h3/request.h"

namespace h3 {

// Where this process's ranks compute, as far as the request's memory is concerned.
struct MemoryShape {
  int ranks_here = 1;        // ranks in this process (thread ranks); 1 in a process world
  int tp = 1;                // the DiT's tensor-parallel size (every rank of the world)
  int activation_bytes = 4;  // the DiT's compute dtype: 4 (fp32) or 2 (bf16)
  // device = cuda: the DiT, the decode and the encoders work in GPU memory, and this host holds
  // only what comes back (the sampler's host copies, rank 0's frames of one clip, the waveform).
  // What the GPUs hold is the fit check's (check_fit in engine/engine.h, engine/planning/fit_check.cpp).
  bool on_gpus = false;
  // Intra-op threads of each rank on the CPU: each holds one block of attention scores at a time
  // (common/cpu_attention.h).
  int cpu_threads = 1;
};

// One process's share of a world as the estimate counts it: `ranks_here` of its `world_ranks`
// ranks (sequence-parallel degree `sp`, the rest tensor-parallel), computing in `compute_dtype`
// ("bf16" or fp32) on `device` ("cuda" or the CPU), each rank with `cpu_threads` intra-op threads.
MemoryShape memory_shape_of(int ranks_here, int world_ranks, int sp, const std::string& compute_dtype,
                            const std::string& device, int cpu_threads);

// Bytes this process needs on top of the loaded weights, each term for all of its ranks: in host
// memory, and on the CPU that is all of it; with MemoryShape::on_gpus, the terms computed on the
// GPUs are 0 (dit_rows is still given) and decode_bytes is the frames rank 0 receives.
struct MemoryEstimate {
  int64_t dit_rows = 0;   // rows of the packed sequence: text bound + audio + video
  int64_t dit_bytes = 0;  // the DiT forward at its widest (one block's activations)
  // Causal: of dit_bytes, the KV cache's keys and values in every layer (the text reserve and
  // cache_records - 1 records of the widest chunk), as the fit planner counts it. 0 otherwise.
  int64_t kv_bytes = 0;
  int64_t decode_bytes = 0;  // the video decode of one clip (tiles gathered, stitched, blended)
  int64_t state_bytes = 0;   // latents, noise and the sampler's state, held through the request
  int64_t margin_bytes = 0;  // a tenth of the rest and 64 MiB: allocator slack, the sink's copies
  // Causal with prompt_switch = recache: the commit inputs the sampler keeps beside the cache to
  // recompute the kept chunks' records at a switch, in host memory (also with GPUs). 0 otherwise.
  int64_t recache_bytes = 0;
  // FL2VA (keyframes in the plan): the VAE encoder's and the vision tower's weights, which the
  // first such request loads beside the model's (counted whole on every rank: an upper bound
  // under tensor parallelism), and the larger of their activations on one keyframe.
  int64_t conditioning_bytes = 0;
  // The phases add up rather than take turns: much of what the DiT phase frees stays resident
  // (the allocator keeps freed blocks below its mmap threshold in the heap), measured against the
  // peak RSS of the tiny model (docs/performance-engine.md, "Memory guard").
  int64_t peak() const {
    return state_bytes + dit_bytes + decode_bytes + conditioning_bytes + recache_bytes + margin_bytes;
  }
};

// The text rows the estimate reserves (longer prompts are a few kB of rows: noise next to video).
constexpr int64_t kTextRowsReserve = 1024;

MemoryEstimate estimate_request_memory(const ModelInfo& m, const ClipPlan& p, const MemoryShape& s);

// The most video latents and audio latents (per channel) an endless stream keeps at a time on
// this model, as the estimate reserves them (its state term, five copies): the decode's clip, the
// clip before it and the newest chunk beyond; three chunks' audio (85 latents) and the audio
// decoder's context on either side. What the stream holds is reported per chunk by
// GenerateExtras::on_causal_chunk (tested against these).
int64_t endless_video_latents(const ModelInfo& m);
int64_t endless_audio_latents(const ModelInfo& m);

// Rows of the widest forward of a causal plan's chunks (dit::ChunkSpan::rows on the plan's canvas):
// a chunk's forward and each record the KV cache keeps of it. An endless stream's chunks are full
// ones, whose audio repeats every three chunks (85/3 latents each). The memory guard's and the fit
// planner's figure.
int64_t widest_causal_chunk_rows(const dit::DitConfig& c, const ClipPlan& p);

// What a request may take: the machine's MemAvailable, or the cgroup's remaining allowance
// (memory.max - memory.current) where that is smaller. 0 when neither can be read.
int64_t available_memory_bytes();

// Throws h3::Error(kOutOfMemory) when the estimate exceeds `limit_bytes` (0: available_memory_bytes();
// no check when that is unknown). The message gives the estimate and its largest term, the limit
// and where it came from, the longest clip that fits at this size and the largest size that fits
// at this length, and the `max-memory` setting that overrides the limit.
void check_request_memory(const ModelInfo& m, const GenerationRequest& req, const ClipPlan& p,
                          const MemoryShape& s, int64_t limit_bytes);

// "256x160, 48 frames" or "256x160, endless": a request as the refusals name it.
std::string request_text(const ClipPlan& p);
// "23.4 GiB", "512.0 MiB".
std::string format_bytes(int64_t bytes);
// Parses a byte count with an optional binary suffix (K, M, G, T; "8G", "512M", "1073741824").
// Throws h3::Error(kInvalidArgument) naming `what`.
int64_t parse_bytes(const std::string& text, const std::string& what);

}  // namespace h3
