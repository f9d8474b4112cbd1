#include "common/cpu_kernels.h"

#include <ATen/cpu/Utils.h>
#include <c10/util/Logging.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "common/fused_linear.h"
#include "h3/error.h"

namespace h3 {
namespace {

// What /proc/cpuinfo says of its first processor: "model name", "vendor_id", "cpu family" and
// "cpu MHz" (empty or 0 where a line is absent).
struct ProcCpuinfo {
  std::string model, vendor;
  int family = 0;
  double mhz = 0;
};

ProcCpuinfo proc_cpuinfo() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  ProcCpuinfo p;
  auto value = [](const std::string& l) {
    const auto colon = l.find(':');
    const auto start = colon == std::string::npos ? std::string::npos : l.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string() : l.substr(start);
  };
  while (std::getline(in, line)) {
    if (line.empty()) break;  // the end of the first processor's block
    if (p.model.empty() && line.rfind("model name", 0) == 0) p.model = value(line);
    if (p.vendor.empty() && line.rfind("vendor_id", 0) == 0) p.vendor = value(line);
    if (p.family == 0 && line.rfind("cpu family", 0) == 0) p.family = std::atoi(value(line).c_str());
    if (p.mhz == 0 && line.rfind("cpu MHz", 0) == 0) p.mhz = std::atof(value(line).c_str());
  }
  return p;
}

CpuFeatures detect() {
  const auto caps = at::cpu::get_cpu_capabilities();
  auto has = [&](const char* key) {
    const auto it = caps.find(key);
    return it != caps.end() && it->second.isBool() && it->second.toBool();
  };
  CpuFeatures f;
  f.avx2 = has("avx2");
  f.fma = has("fma3");
  f.avx512 = has("avx512_f") && has("avx512_bw") && has("avx512_vl") && has("avx512_dq");
  f.avx512_vnni = has("avx512_vnni");
  f.avx512_bf16 = has("avx512_bf16");
  f.avx512_fp16 = has("avx512_fp16");
  f.amx_bf16 = has("amx_bf16") && has("amx_tile");
  if (const auto it = caps.find("num_logical_cores"); it != caps.end() && it->second.isInt()) {
    f.logical_cores = static_cast<int>(it->second.toInt());
  }
  const ProcCpuinfo p = proc_cpuinfo();
  f.model = p.model;
  f.vendor = p.vendor == "GenuineIntel"   ? CpuVendor::kIntel
             : p.vendor == "AuthenticAMD" ? CpuVendor::kAmd
                                          : CpuVendor::kOther;
  f.family = p.family;
  if (f.model.empty()) {
    const auto it = caps.find("cpu_name");
    f.model = it != caps.end() && it->second.isString() ? it->second.toStringRef() : "an unnamed CPU";
  }
  f.nominal_ghz = p.mhz / 1000.0;
  return f;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

[[noreturn]] void refuse(const std::string& variable, const std::string& value, const std::string& reason,
                         const std::string& instead) {
  throw Error(ErrorKind::kInvalidArgument, variable + "=" + value + ": " + reason + "; " + instead +
                                               " (docs/performance.md, \"The CPU at hand\")");
}

// ATEN_CPU_CAPABILITY above what the CPU has: ATen would dispatch to kernels it cannot run.
void check_aten_capability(const CpuFeatures& f, const std::string& value) {
  const std::string cpu = "this CPU (" + f.model + ") ";
  if (value == "avx512" && !f.avx512) {
    refuse("ATEN_CPU_CAPABILITY", value,
           cpu +
               "has no AVX-512 (F, BW, VL and DQ), so ATen's AVX-512 kernels would stop the process with an "
               "illegal instruction",
           f.avx2 ? "set it to avx2 or default, or unset it" : "set it to default or unset it");
  }
  if (value == "avx2" && !(f.avx2 && f.fma)) {
    refuse(
        "ATEN_CPU_CAPABILITY", value,
        cpu +
            "has no AVX2 and FMA, so ATen's AVX2 kernels would stop the process with an illegal instruction",
        "set it to default or unset it");
  }
}

// oneDNN's instruction-set levels as ONEDNN_MAX_CPU_ISA names them, ranked; unset, ALL, DEFAULT
// or a name oneDNN does not know (it ignores those) caps nothing.
constexpr int kIsaAvx512Core = 6, kIsaAvx512Bf16 = 8, kIsaAmx = 10, kIsaUncapped = 100;
int onednn_isa_rank(std::string v) {
  for (char& ch : v) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  static const std::map<std::string, int> ranks{{"SSE41", 1},
                                                {"AVX", 2},
                                                {"AVX2", 3},
                                                {"AVX2_VNNI", 4},
                                                {"AVX2_VNNI_2", 5},
                                                {"AVX512_CORE", kIsaAvx512Core},
                                                {"AVX512_CORE_VNNI", 7},
                                                {"AVX512_CORE_BF16", kIsaAvx512Bf16},
                                                {"AVX512_CORE_FP16", 9},
                                                {"AVX10_1_512", 9},
                                                {"AVX512_CORE_AMX", kIsaAmx},
                                                {"AVX10_1_512_AMX", kIsaAmx},
                                                {"AVX512_CORE_AMX_FP16", 11},
                                                {"AVX10_1_512_AMX_FP16", 11}};
  const auto it = ranks.find(v);
  return it == ranks.end() ? kIsaUncapped : it->second;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

std::string describe_features(const CpuFeatures& f) {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.avx512, "avx512");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_fp16, "avx512_fp16");
  add(f.amx_bf16, "amx_bf16");
  return s.empty() ? "none of avx2, avx512, bf16" : s;
}

const char* to_string(GemmPath p) {
  return p == GemmPath::kOnednnTiles ? "oneDNN tiles" : "ATen";
}

const char* to_string(AttentionPath p) {
  return p == AttentionPath::kGemmBlocks ? "oneDNN GEMM blocks" : "fused SDPA";
}

KernelOverrides kernel_overrides_from_env() {
  return {env("H3_CPU_GEMM"), env("H3_CPU_ATTENTION"), env("ATEN_CPU_CAPABILITY"), env("ONEDNN_MAX_CPU_ISA")};
}

CpuKernels choose_cpu_kernels(const CpuFeatures& f, at::ScalarType dtype, bool have_onednn,
                              const KernelOverrides& o) {
  check_aten_capability(f, o.aten_capability);
  const bool bf16 = dtype == at::kBFloat16;
  const std::string cpu = "this CPU (" + f.model + ") ";
  CpuKernels k;
  k.bf16_native = f.native_bf16();
  // What oneDNN may use: the CPU's features under ONEDNN_MAX_CPU_ISA's cap.
  const int isa = onednn_isa_rank(o.onednn_max_isa);
  const bool dnn_avx512 = f.avx512 && isa >= kIsaAvx512Core;
  const bool dnn_bf16 = (f.avx512_bf16 && isa >= kIsaAvx512Bf16) || (f.amx_bf16 && isa >= kIsaAmx);
  const std::string capped = isa < kIsaUncapped ? " (under ONEDNN_MAX_CPU_ISA=" + o.onednn_max_isa + ")" : "";
  // oneDNN's bf16 linear: LibTorch runs it only on AVX-512 (F, BW, VL, DQ) or AMX-BF16.
  const bool onednn_runs = have_onednn && (!bf16 || dnn_avx512 || (f.amx_bf16 && isa >= kIsaAmx));
  const std::string no_onednn =
      !have_onednn ? std::string("this LibTorch has no oneDNN fused linears (mkldnn::_linear_pointwise)")
                   : cpu + "has no AVX-512 (F, BW, VL and DQ) nor AMX-BF16" + capped +
                         ", where LibTorch refuses oneDNN's bf16 linear";

  if (o.gemm.empty()) {
    if (!have_onednn) {
      k.gemm = GemmPath::kAten;
      k.why = "GEMM: ATen (no oneDNN fused linears in this LibTorch)";
    } else if (!bf16) {
      k.gemm = GemmPath::kOnednnTiles;
      k.why = "GEMM: oneDNN tiles (fp32 on any x86 CPU)";
    } else if (dnn_bf16 && onednn_runs) {
      k.gemm = GemmPath::kOnednnTiles;
      k.why = std::string("GEMM: oneDNN tiles (native bf16: ") +
              (f.amx_bf16 && isa >= kIsaAmx ? "AMX-BF16" : "AVX512_BF16") + ")";
    } else {
      k.gemm = GemmPath::kAten;
      k.why = "GEMM: ATen (no native bf16 for oneDNN" + capped + ")";
    }
  } else if (o.gemm == "onednn") {
    if (!onednn_runs) {
      refuse("H3_CPU_GEMM", o.gemm, std::string(bf16 ? "with compute-dtype bf16, " : "") + no_onednn,
             "unset it or set it to aten");
    }
    k.gemm = GemmPath::kOnednnTiles;
    k.why = "GEMM: oneDNN tiles (H3_CPU_GEMM)";
  } else if (o.gemm == "aten") {
    k.gemm = GemmPath::kAten;
    k.why = "GEMM: ATen (H3_CPU_GEMM)";
  } else {
    refuse("H3_CPU_GEMM", o.gemm, "not a GEMM path",
           "set it to onednn or aten, or unset it (chosen by the CPU)");
  }

  // ATen's own kernels (the flash attention's softmax and its packing) at AVX-512: unless the CPU
  // lacks it or ATEN_CPU_CAPABILITY holds ATen below it.
  const bool aten_avx512 = f.avx512 && o.aten_capability != "avx2" && o.aten_capability != "default";
  const bool intel = f.vendor == CpuVendor::kIntel;
  const bool amx = f.amx_bf16 && isa >= kIsaAmx;
  if (o.attention.empty()) {
    if (!bf16 && !have_onednn) {
      k.attention = AttentionPath::kFusedSdpa;
      k.why += "; attention: fused SDPA (no oneDNN)";
    } else if (!bf16 && aten_avx512 && intel) {
      // Measured on an AVX-512 Xeon: the flash kernel (its GEMMs MKL's) takes 0.77x the GEMM
      // blocks' CPU time over the race's 20 steps (docs/performance.md, "The CPU at hand").
      k.attention = AttentionPath::kFusedSdpa;
      k.why += "; attention: fused SDPA (fp32 on an Intel AVX-512 CPU)";
    } else if (!bf16) {
      // Measured on an AVX2 EPYC: 0.55x the flash kernel's time; on an AVX-512 EPYC (Zen 5), where
      // MKL's GEMMs run at half oneDNN's rate: 0.53x.
      k.attention = AttentionPath::kGemmBlocks;
      k.why += aten_avx512
                   ? "; attention: oneDNN GEMM blocks (fp32 on AVX-512 outside Intel, where MKL is slow)"
                   : "; attention: oneDNN GEMM blocks (fp32 without AVX-512)";
    } else if (amx || !(dnn_bf16 && onednn_runs)) {
      // AMX: the flash kernel multiplies in AMX tiles (3.3x its fp32 rate on a Xeon); without
      // oneDNN's native bf16 the GEMM blocks would be emulated too.
      k.attention = AttentionPath::kFusedSdpa;
      k.why += amx            ? "; attention: fused SDPA (bf16 on AMX, scores summed in fp32)"
               : !have_onednn ? "; attention: fused SDPA (no oneDNN)"
                              : "; attention: fused SDPA (no native bf16 for oneDNN" + capped + ")";
    } else {
      // AVX512_BF16 without AMX: the flash kernel's bf16 GEMMs ran at its fp32 rate on a Zen 5,
      // the GEMM blocks at 1.7x the fp32 attention's.
      k.attention = AttentionPath::kGemmBlocks;
      k.why += "; attention: oneDNN GEMM blocks (bf16 on AVX512_BF16 without AMX)";
    }
  } else if (o.attention == "gemm") {
    if (!onednn_runs) {
      refuse("H3_CPU_ATTENTION", o.attention,
             std::string(bf16 ? "with compute-dtype bf16, " : "") + no_onednn, "unset it or set it to sdpa");
    }
    k.attention = AttentionPath::kGemmBlocks;
    k.why += "; attention: oneDNN GEMM blocks (H3_CPU_ATTENTION)";
  } else if (o.attention == "sdpa") {
    k.attention = AttentionPath::kFusedSdpa;
    k.why += "; attention: fused SDPA (H3_CPU_ATTENTION)";
  } else {
    refuse("H3_CPU_ATTENTION", o.attention, "not an attention path",
           "set it to gemm or sdpa, or unset it (chosen by the CPU)");
  }
  if (bf16 && !f.native_bf16()) k.why += "; bf16 emulated: " + cpu + "has neither AVX512_BF16 nor AMX-BF16";
  return k;
}

namespace {

// One choice per dtype for the process's life (the environment is read once): every rank thread
// and every layer of a run agree on the path. A refused choice is not kept, so it throws again.
std::mutex chosen_mutex;
std::map<at::ScalarType, CpuKernels>& chosen_kernels() {
  static std::map<at::ScalarType, CpuKernels> chosen;
  return chosen;
}

at::ScalarType kernel_key(at::ScalarType dtype) {
  return dtype == at::kBFloat16 ? at::kBFloat16 : at::kFloat;
}

}  // namespace

const CpuKernels& cpu_kernels(at::ScalarType dtype) {
  std::lock_guard<std::mutex> lock(chosen_mutex);
  auto& chosen = chosen_kernels();
  const at::ScalarType key = kernel_key(dtype);
  if (auto it = chosen.find(key); it != chosen.end()) return it->second;
  static const KernelOverrides overrides = kernel_overrides_from_env();
  CpuKernels k =
      choose_cpu_kernels(cpu_features(), key, fused_linear_backend() == std::string("oneDNN"), overrides);
  return chosen.emplace(key, std::move(k)).first->second;
}

ScopedCpuKernels::ScopedCpuKernels(at::ScalarType dtype, const CpuKernels& k) : dtype_(kernel_key(dtype)) {
  std::lock_guard<std::mutex> lock(chosen_mutex);
  auto& chosen = chosen_kernels();
  if (auto it = chosen.find(dtype_); it != chosen.end()) {
    had_ = true;
    previous_ = it->second;
  }
  chosen[dtype_] = k;
}

ScopedCpuKernels::~ScopedCpuKernels() {
  std::lock_guard<std::mutex> lock(chosen_mutex);
  auto& chosen = chosen_kernels();
  if (had_) {
    chosen[dtype_] = previous_;
  } else {
    chosen.erase(dtype_);
  }
}

std::string describe_cpu_kernels() {
  auto one = [](const char* name, at::ScalarType t) {
    const CpuKernels& k = cpu_kernels(t);
    return std::string(name) + ": GEMM " + to_string(k.gemm) + ", attention " + to_string(k.attention) +
           " (" + k.why + ")";
  };
  return one("fp32", at::kFloat) + "; " + one("bf16", at::kBFloat16);
}

void check_cpu_kernels() {
  const std::string line = describe_cpu_kernels();  // throws for a refused choice
  static std::once_flag once;
  std::call_once(once, [&] {
    c10::initLogging();  // reads TORCH_CPP_LOG_LEVEL (a C++ program's LibTorch does not by itself)
    LOG(INFO) << "h3: CPU " << cpu_features().model << " [" << describe_features(cpu_features())
              << "]; kernels " << line;
  });
}

}  // namespace h3
