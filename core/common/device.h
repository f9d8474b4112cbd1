// Devices as users name them ("cpu", "cuda", "cuda:K") and the checks that turn a CUDA request
// this build or machine cannot serve into a message that says what to change, instead of a
// LibTorch backtrace from deep inside the first CUDA call.
#pragma once

#include <c10/core/Device.h>

#include <string>

namespace h3 {

// CUDA devices this process can use: 0 in a build without CUDA, without an NVIDIA driver or
// without a visible GPU.
int cuda_device_count();

// "cpu", "cuda" (cuda:0) or "cuda:K", checked against this build and machine. `what` names the
// setting in errors ("--device", "device property"). Throws h3::Error(kInvalidArgument).
c10::Device parse_device(const std::string& name, const std::string& what);

// Throws h3::Error(kInvalidArgument) unless `count` CUDA devices are visible (one per rank).
void require_cuda_devices(int count, const std::string& what);

}  // namespace h3
