// Which CPU kernels the DiT runs, chosen at run time from what the CPU has (docs/performance.md,
// "The CPU at hand"): the GEMM path of its linears and the path of its attention, per compute
// dtype. The machines this project runs on differ (AVX2 or AVX-512, with or without AVX512_BF16
// or AMX), and a kernel that wins on one loses on another:
//  - fp32 linears: oneDNN's fused linears in fixed tiles (common/fused_linear.h) everywhere
//    LibTorch has them: they beat ATen's sgemm and keep the bits thread-count independent.
//  - bf16 linears: the same oneDNN tiles where the CPU multiplies bf16 natively (AVX512_BF16 or
//    AMX-BF16: oneDNN's JIT uses either, on any vendor); ATen's emulation elsewhere (LibTorch
//    refuses oneDNN's bf16 linear without AVX-512).
//  - attention: two oneDNN GEMMs per head and block of query rows (common/cpu_attention.h)
//    wherever oneDNN multiplies the dtype natively, except where LibTorch's fused flash kernel is
//    at home: fp32 on an Intel AVX-512 CPU (its GEMMs are MKL's: 0.77x the GEMM blocks' CPU time
//    on a Xeon) and bf16 on AMX (its GEMMs AMX tiles). Elsewhere the flash kernel loses: on an
//    AVX2 EPYC 1.8x the GEMM blocks' time, on an AVX-512 EPYC (Zen 5) 1.9x in fp32, where MKL
//    runs at half oneDNN's rate, and 3.2x in bf16 without AMX. The GEMM blocks round bf16's
//    scores to bf16 where the flash kernel sums them in fp32: on the golden cases both stay
//    within 0.8 % of max |v| of fp32 (tests/core/cpu_kernels_test.cpp).
// The environment may force a path (H3_CPU_GEMM, H3_CPU_ATTENTION); a forced path this CPU or
// LibTorch cannot run is refused with the reason (an h3::Error), as is an ATEN_CPU_CAPABILITY
// above what the CPU has (ATen would take it on trust and die of an illegal instruction). A cap on
// oneDNN's instructions (ONEDNN_MAX_CPU_ISA) counts as the CPU lacking what it withholds.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace h3 {

enum class CpuVendor { kIntel, kAmd, kOther };

// What this CPU has, as LibTorch's cpuinfo detects it (plus the model name, vendor and family of
// /proc/cpuinfo).
struct CpuFeatures {
  std::string model;  // "Intel(R) Xeon(R) Processor"; cpuinfo's name where /proc has none
  CpuVendor vendor = CpuVendor::kOther;
  int family = 0;  // /proc/cpuinfo's "cpu family": 6 an Intel core, 25 AMD's Zen 3 and 4, 26 Zen 5
  bool avx2 = false, fma = false;
  bool avx512 = false;  // AVX-512 F, BW, VL and DQ: what LibTorch's and oneDNN's AVX-512 kernels need
  bool avx512_vnni = false, avx512_bf16 = false, avx512_fp16 = false;
  bool amx_bf16 = false;   // AMX tiles with bf16 multiplies
  double nominal_ghz = 0;  // /proc/cpuinfo's "cpu MHz" / 1000; 0 when absent
  int logical_cores = 0;
  bool native_bf16() const { return avx512_bf16 || amx_bf16; }
};

// This machine's features (detected once).
const CpuFeatures& cpu_features();

// "avx2 fma avx512 avx512_vnni avx512_bf16 avx512_fp16 amx_bf16": the ones present, in that order
// ("none of avx2, avx512, bf16" when none is).
std::string describe_features(const CpuFeatures& f);

enum class GemmPath { kOnednnTiles, kAten };
enum class AttentionPath { kGemmBlocks, kFusedSdpa };
const char* to_string(GemmPath);
const char* to_string(AttentionPath);

// The environment's forced choices, as given (empty: not forced).
struct KernelOverrides {
  std::string gemm;             // H3_CPU_GEMM: "onednn" or "aten"
  std::string attention;        // H3_CPU_ATTENTION: "gemm" or "sdpa"
  std::string aten_capability;  // ATEN_CPU_CAPABILITY: "default", "avx2" or "avx512"
  std::string onednn_max_isa;   // ONEDNN_MAX_CPU_ISA: oneDNN's cap ("AVX2", "AVX512_CORE_BF16", ...)
};
KernelOverrides kernel_overrides_from_env();

// The paths for one compute dtype, and why (a phrase per choice).
struct CpuKernels {
  GemmPath gemm = GemmPath::kAten;
  AttentionPath attention = AttentionPath::kFusedSdpa;
  bool bf16_native = false;  // bf16's products at the CPU's own bf16 rate (else emulated)
  std::string why;
};

// The choice for `dtype` (kFloat or kBFloat16) on a CPU with `f`, LibTorch having oneDNN's fused
// linears or not (`have_onednn`). Throws h3::Error(kInvalidArgument) naming the variable, its
// value, what the CPU or LibTorch lacks and what to do, for a forced choice it cannot run or a
// value it does not know.
CpuKernels choose_cpu_kernels(const CpuFeatures& f, at::ScalarType dtype, bool have_onednn,
                              const KernelOverrides& o);

// The choice for this process (this CPU, this LibTorch, this environment), made once per dtype;
// throws as choose_cpu_kernels does (again at each call: a refused choice never runs).
const CpuKernels& cpu_kernels(at::ScalarType dtype);

// Tests and benchmarks: `k` as this process's choice for `dtype` while it lives, the previous
// one after (chosen again at the next use if there was none). Not while an engine computes.
class ScopedCpuKernels {
 public:
  ScopedCpuKernels(at::ScalarType dtype, const CpuKernels& k);
  ~ScopedCpuKernels();
  ScopedCpuKernels(const ScopedCpuKernels&) = delete;
  ScopedCpuKernels& operator=(const ScopedCpuKernels&) = delete;

 private:
  at::ScalarType dtype_;
  bool had_ = false;
  CpuKernels previous_;
};

// Checks both dtypes' choices (throws as above) and logs them at LibTorch's INFO level
// (TORCH_CPP_LOG_LEVEL=INFO shows it), once per process: Engine::open calls it on the CPU.
void check_cpu_kernels();

// One line: "fp32: GEMM oneDNN tiles, attention oneDNN GEMM blocks; bf16: ..." with the reasons.
std::string describe_cpu_kernels();

}  // namespace h3
