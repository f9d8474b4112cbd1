// EngineOptions::compute_dtype: which precision the DiT and the text encoder compute in, and
// whether this CPU has the instructions that make bf16 fast (docs/engine.md, "Compute dtype").
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

namespace h3::engine_detail {

// "fp32" or "bf16": `given` checked, or the device's default when it is empty (fp32 on cpu,
// bf16 on cuda: the release contract). Throws h3::Error(kInvalidArgument) naming
// compute-dtype and the values it takes.
std::string resolve_compute_dtype(const std::string& given, const std::string& device);

// at::kFloat or at::kBFloat16 for a resolved name.
at::ScalarType compute_scalar_type(const std::string& resolved);

// Whether the CPU has AMX-BF16 or AVX-512-BF16 (ATen's runtime detection): without them ATen
// emulates bf16 matrix products, which are then slower than fp32.
bool cpu_has_native_bf16();

// Tells stderr, once per process, that bf16 on this CPU is emulated (slower than fp32; only
// the DiT's weight memory halves). Does nothing on a CPU with native bf16.
void note_emulated_bf16();

}  // namespace h3::engine_detail
