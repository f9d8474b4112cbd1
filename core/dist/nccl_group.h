// The NCCL backend of Group (CUDA tensors). Compiled only in builds with
// NCCL and a CUDA LibTorch (H3_HAVE_CUDA && H3_TORCH_HAS_CUDA). Internal to
// core/dist: callers get it from run_threads/join_tcp with Backend::kNccl.
#pragma once

#include "h3_config.h"

#if H3_HAVE_CUDA && H3_TORCH_HAS_CUDA

#include <chrono>
#include <memory>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dist/group.h"

namespace h3::dist {

// Every rank calls it; rank 0 creates the NCCL unique id and shares it
// through `store`. Returns once the communicator is up, or throws
// h3::Error(kDistributed) after `timeout`. `processes`: as make_gloo_group's (the ranks show
// their signs of life on the store).
std::unique_ptr<Group> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       std::chrono::milliseconds timeout, int cuda_device, bool processes);

}  // namespace h3::dist

#endif
