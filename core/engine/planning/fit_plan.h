// The fit planner (docs/engine.md, "Fit planner"): for a request and N ranks, what each rank's
// device holds in every legal tensor-parallel x sequence-parallel layout (TP x SP = N), and
// whether that fits in the device's memory. Computed from the configs and the plan alone:
// nothing is loaded or allocated, so a caller can refuse a request that cannot fit before it
// reads a single weight. Torch-free header: the plugin can include it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dit/config.h"
#include "engine/model/model.h"
#include "engine/planning/plan.h"
#include "h3/request.h"

namespace h3 {

struct PlanOptions {
  int ranks = 1;              // N: every rank of the world, tp x sp
  int64_t device_memory = 0;  // bytes of one rank's device; > 0
  // Bytes per element of the DiT's bf16 tensors and of its activations (the compute dtype):
  // 2 (bf16, the release's GPU contract) or 4 (fp32). The tensors the release stores in fp32
  // (dit::ParamSpec::fp32) and the residual stream are 4 bytes either way.
  int dtype_bytes = 2;
  // AdaLN tables (dit/adaln_tables.h): the projections leave memory and the tables of the
  // request's timesteps take their place.
  bool adaln_tables = false;
  // Counts the video decode of one clip (activations; ModelInfo::vae). Off for the DitConfig
  // overload of plan_layouts, which knows no VAE.
  bool include_decode = true;
  // What errors call the device memory: the command's flag, or the element's property.
  std::string device_memory_name = "--device-memory";
};

// One layout and what each of its ranks holds at the request's peak, in bytes.
struct LayoutFit {
  int tp = 1, sp = 1;
  int64_t rows = 0;            // rows of the widest DiT forward (text reserve + audio + video, or a chunk's)
  int64_t rows_per_rank = 0;   // ceil(rows / sp): the most rows of the residual stream an SP rank holds
  int64_t heads_per_rank = 0;  // heads / (tp * sp): this rank's heads after the all-to-all
  int64_t weights = 0;         // the DiT's shard (tp); without the AdaLN projections when tables are on
  int64_t tables = 0;          // the AdaLN tables of the request's timesteps (0 when off)
  int64_t latents = 0;         // the sampler's state: noise, latents, velocity, next step, the decode's copy
  int64_t activations = 0;     // one block's activations over this rank's rows (residual stream, FFN, RoPE)
  int64_t attention = 0;       // q/k/v of every row for this rank's heads, and the score block
  int64_t kv_cache = 0;        // causal: keys and values of the retained records, this rank's heads
  int64_t decode = 0;          // the video decode of one clip (0 when not counted)
  // FL2VA (keyframes in the plan; with a model folder): the VAE encoder's and the vision tower's
  // weights, whole on every rank, and the larger of their activations on one keyframe, held for
  // the whole request (an upper bound: MemoryEstimate::conditioning_bytes).
  int64_t conditioning = 0;
  int64_t device_memory = 0;  // what it was compared with
  // The DiT forward and the decode take turns: a device's caching allocator gives the decode the
  // blocks the forward freed, so the larger of the two counts. Weights, tables, latents and the
  // KV cache stay through both (the causal sampler decodes each chunk with its cache resident),
  // and so does FL2VA's conditioning.
  int64_t total() const;
  bool fits() const { return total() <= device_memory; }
  std::string name() const;  // "TP4×SP2"
};

// Every legal layout of o.ranks ranks, largest tp first, as dit::check_layout decides: tp divides
// the heads, the FFN width and the AdaLN width; sp divides the heads per TP rank (Ulysses splits
// each TP rank's heads over its SP ranks). Throws h3::Error(kInvalidArgument) naming the device
// memory when it is not positive, and naming the ranks and the model's heads when no layout splits
// them (with the rank counts that would).
std::vector<LayoutFit> plan_layouts(const ModelInfo& m, const ClipPlan& p, const PlanOptions& o);
// A transformer config alone (no VAE): the decode is not counted.
std::vector<LayoutFit> plan_layouts(const dit::DitConfig& c, const ClipPlan& p, const PlanOptions& o);

// The layouts that fit ("fits in 80.0 GiB per rank: TP8×SP1, TP4×SP2"), or that none does and the
// smallest device memory that would, with its layout.
std::string fit_summary(const std::vector<LayoutFit>& layouts);

// The layout with the smallest total (the first of equals).
const LayoutFit& leanest(const std::vector<LayoutFit>& layouts);

// A ModelInfo that holds only `c` (the release's VAE geometry and shifts, default request): what
// make_plan needs to plan a request for a bare transformer config.
ModelInfo model_of_config(const dit::DitConfig& c);

// "80.0 GiB", two decimals below 10 GiB ("8.31 GiB"), MiB below 1 GiB ("76.8 MiB").
std::string format_gib(int64_t bytes);

}  // namespace h3
