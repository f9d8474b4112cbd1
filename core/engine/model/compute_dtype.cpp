#include "engine/model/compute_dtype.h"

#include <ATen/cpu/Utils.h>

#include <cstdio>
#include <mutex>

#include "h3/error.h"

namespace h3::engine_detail {

std::string resolve_compute_dtype(const std::string& given, const std::string& device) {
  if (given.empty()) return device == "cuda" ? "bf16" : "fp32";
  if (given == "fp32" || given == "bf16") return given;
  throw Error(ErrorKind::kInvalidArgument,
              "compute-dtype = \"" + given +
                  "\": must be \"fp32\" or \"bf16\" (unset: the device's default, fp32 on cpu and bf16 "
                  "on cuda)");
}

at::ScalarType compute_scalar_type(const std::string& resolved) {
  return resolved == "bf16" ? at::kBFloat16 : at::kFloat;
}

bool cpu_has_native_bf16() {
  const auto caps = at::cpu::get_cpu_capabilities();
  auto has = [&](const char* key) {
    const auto it = caps.find(key);
    return it != caps.end() && it->second.isBool() && it->second.toBool();
  };
  return has("amx_bf16") || has("avx512_bf16");
}

void note_emulated_bf16() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (cpu_has_native_bf16()) return;
    std::fprintf(stderr,
                 "h3: compute-dtype bf16 on a CPU without AMX-BF16 or AVX-512-BF16: ATen emulates the bf16 "
                 "matrix products, so the DiT runs slower than in fp32; only its weight memory halves "
                 "(docs/performance.md, \"bf16 compute mode\")\n");
  });
}

}  // namespace h3::engine_detail
