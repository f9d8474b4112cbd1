#include "common/device.h"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include "h3/error.h"
#include "h3_config.h"

namespace h3 {

int cuda_device_count() {
#if H3_TORCH_HAS_CUDA
  return at::hasCUDA() ? static_cast<int>(at::detail::getCUDAHooks().deviceCount()) : 0;
#else
  return 0;
#endif
}

void require_cuda_devices(int count, const std::string& what) {
#if !H3_TORCH_HAS_CUDA
  throw Error(ErrorKind::kInvalidArgument,
              what +
                  " = cuda: this build has no CUDA (configure found no CUDA LibTorch or no CUDA toolkit "
                  "with NCCL: see 'LibTorch has CUDA' in meson's summary); use cpu");
#endif
  const int visible = cuda_device_count();
  if (visible == 0) {
    throw Error(ErrorKind::kInvalidArgument,
                what +
                    " = cuda: no CUDA GPU is usable here (no NVIDIA driver, or no GPU visible: check "
                    "nvidia-smi and CUDA_VISIBLE_DEVICES); use cpu");
  }
  if (count > visible) {
    throw Error(ErrorKind::kInvalidArgument,
                what + " = cuda with " + std::to_string(count) + " ranks needs " + std::to_string(count) +
                    " GPUs (one per rank) but " + std::to_string(visible) +
                    " are visible; use fewer ranks or make more GPUs visible (CUDA_VISIBLE_DEVICES)");
  }
}

c10::Device parse_device(const std::string& name, const std::string& what) {
  if (name == "cpu") return c10::Device(c10::kCPU);
  int index = 0;
  if (name.rfind("cuda:", 0) == 0) {
    const std::string digits = name.substr(5);
    if (digits.empty() || digits.size() > 3 || digits.find_first_not_of("0123456789") != std::string::npos) {
      throw Error(ErrorKind::kInvalidArgument,
                  what + " = \"" + name + "\": expected cpu, cuda or cuda:K with K a GPU index");
    }
    index = std::stoi(digits);
  } else if (name != "cuda") {
    throw Error(ErrorKind::kInvalidArgument, what + " = \"" + name + "\": expected cpu, cuda or cuda:K");
  }
  require_cuda_devices(1, what);
  const int visible = cuda_device_count();
  if (index >= visible) {
    throw Error(ErrorKind::kInvalidArgument,
                what + " = \"" + name + "\": there is no GPU " + std::to_string(index) + " (" +
                    std::to_string(visible) + " visible: cuda:0..cuda:" + std::to_string(visible - 1) + ")");
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace h3
