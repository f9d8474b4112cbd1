// check_fit (engine/engine.h): the fit planner's layouts of the engine's ranks against each
// rank's device memory, before Engine::open loads anything.
#include <algorithm>
#include <string>

#include "common/device.h"
#include "engine/engine.h"
#include "engine/model/compute_dtype.h"
#include "engine/planning/fit_plan.h"
#include "engine/planning/memory_guard.h"
#include "engine/planning/plan.h"
#include "h3/error.h"
#include "h3_config.h"

#if H3_HAVE_CUDA && H3_TORCH_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace h3 {
namespace {

// The first GPU's memory in bytes; 0 where there is none to ask.
int64_t gpu_memory() {
#if H3_HAVE_CUDA && H3_TORCH_HAS_CUDA
  cudaDeviceProp prop{};
  if (cuda_device_count() > 0 && cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    return static_cast<int64_t>(prop.totalGlobalMem);
  }
#endif
  return 0;
}

}  // namespace

void check_fit(const EngineOptions& opts, const GenerationRequest& req) {
  const int64_t device_memory = opts.device_memory > 0  ? opts.device_memory
                                : opts.device == "cuda" ? gpu_memory()
                                                        : 0;
  if (device_memory <= 0) return;
  const ModelInfo m = read_model(opts.model_dir, opts.ref2va);
  const ClipPlan p = make_plan(m, req);
  PlanOptions o;
  o.ranks = opts.rendezvous.empty() ? opts.ranks : opts.world_size;
  o.device_memory = device_memory;
  o.dtype_bytes = engine_detail::resolve_compute_dtype(opts.compute_dtype, opts.device) == "bf16" ? 2 : 4;
  o.adaln_tables = opts.adaln_tables;
  o.device_memory_name = "device-memory";
  const auto layouts = plan_layouts(m, p, o);
  const int sp = std::max(1, opts.sp);
  const auto mine =
      std::find_if(layouts.begin(), layouts.end(), [&](const LayoutFit& f) { return f.sp == sp; });
  if (mine == layouts.end() || mine->fits()) return;  // an illegal layout: Engine::open names it
  throw Error(ErrorKind::kOutOfMemory,
              "the request (" + std::to_string(p.canvas_width) + "x" + std::to_string(p.canvas_height) +
                  ", " + std::to_string(p.num_frames) + " frames) needs " + format_bytes(mine->total()) +
                  " per rank as " + mine->name() + " but each device has " + format_bytes(device_memory) +
                  ": " + fit_summary(layouts) +
                  " (set tp-size/sp-size to such a layout, lower the size or length, or use more ranks; "
                  "`h3 plan` prints every term)");
}

}  // namespace h3
