// The CPU kernel choice (common/cpu_kernels.h) on described CPUs: what each kind of x86 CPU gets
// per dtype, and the refusals of a forced path or an ATEN_CPU_CAPABILITY the CPU cannot run, with
// their exact texts. And on this machine: the choice reaches the DiT's linears and attention, and
// bf16 through the kernels chosen here stays within the stated distance of fp32 on the golden cases.
#include "common/cpu_kernels.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "common/cpu_attention.h"
#include "common/fused_linear.h"
#include "dit/dit_test_util.h"
#include "dit/transformer.h"
#include "h3/error.h"

namespace h3 {
namespace {

CpuFeatures avx2_cpu() {  // Zen 3
  CpuFeatures f;
  f.model = "AMD EPYC 7B13";
  f.vendor = CpuVendor::kAmd;
  f.family = 25;
  f.avx2 = f.fma = true;
  return f;
}

CpuFeatures avx512_bf16_cpu() {  // Zen 4: AVX-512 with AVX512_BF16, no AMX
  CpuFeatures f = avx2_cpu();
  f.model = "AMD EPYC 9B14";
  f.avx512 = f.avx512_vnni = f.avx512_bf16 = true;
  return f;
}

CpuFeatures amx_cpu() {
  CpuFeatures f = avx512_bf16_cpu();
  f.model = "Intel(R) Xeon(R) Processor";
  f.vendor = CpuVendor::kIntel;
  f.family = 6;
  f.avx512_fp16 = f.amx_bf16 = true;
  return f;
}

std::string refusal(const CpuFeatures& f, at::ScalarType dtype, const KernelOverrides& o) {
  try {
    (void)choose_cpu_kernels(f, dtype, true, o);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    return e.what();
  }
  return "(not refused)";
}

TEST(CpuKernelChoice, Fp32AttentionIsTheFlashKernelOnlyOnAnIntelAvx512Cpu) {
  // Everywhere the oneDNN tiles; the fused flash kernel (its GEMMs MKL's) on an Intel AVX-512 CPU,
  // the oneDNN GEMM blocks elsewhere: AVX2 (of any vendor) and AMD's AVX-512.
  CpuKernels k = choose_cpu_kernels(avx2_cpu(), at::kFloat, true, {});
  EXPECT_EQ(k.gemm, GemmPath::kOnednnTiles);
  EXPECT_EQ(k.attention, AttentionPath::kGemmBlocks);
  EXPECT_NE(k.why.find("attention: oneDNN GEMM blocks (fp32 without AVX-512)"), std::string::npos) << k.why;
  k = choose_cpu_kernels(avx512_bf16_cpu(), at::kFloat, true, {});
  EXPECT_EQ(k.gemm, GemmPath::kOnednnTiles);
  EXPECT_EQ(k.attention, AttentionPath::kGemmBlocks);
  EXPECT_NE(k.why.find("attention: oneDNN GEMM blocks (fp32 on AVX-512 outside Intel, where MKL is slow)"),
            std::string::npos)
      << k.why;
  k = choose_cpu_kernels(amx_cpu(), at::kFloat, true, {});
  EXPECT_EQ(k.gemm, GemmPath::kOnednnTiles);
  EXPECT_EQ(k.attention, AttentionPath::kFusedSdpa);
  EXPECT_NE(k.why.find("attention: fused SDPA (fp32 on an Intel AVX-512 CPU)"), std::string::npos) << k.why;
  CpuFeatures intel_avx2 = avx2_cpu();  // an Intel AVX2 core takes the AVX2 EPYC's choice
  intel_avx2.vendor = CpuVendor::kIntel;
  EXPECT_EQ(choose_cpu_kernels(intel_avx2, at::kFloat, true, {}).attention, AttentionPath::kGemmBlocks);
  // ATen held to AVX2 on an Intel AVX-512 CPU: the AVX2 machine's choice.
  KernelOverrides o;
  o.aten_capability = "avx2";
  EXPECT_EQ(choose_cpu_kernels(amx_cpu(), at::kFloat, true, o).attention, AttentionPath::kGemmBlocks);
  // Without oneDNN's fused linears in LibTorch: ATen and its fused attention, on any CPU.
  for (const CpuFeatures& f : {avx2_cpu(), avx512_bf16_cpu(), amx_cpu()}) {
    k = choose_cpu_kernels(f, at::kFloat, false, {});
    EXPECT_EQ(k.gemm, GemmPath::kAten) << f.model;
    EXPECT_EQ(k.attention, AttentionPath::kFusedSdpa) << f.model;
  }
}

TEST(CpuKernelChoice, Bf16TakesOnednnWhereTheCpuMultipliesItNatively) {
  // AVX512_BF16 without AMX (Zen 4 and 5): the tiles and the GEMM blocks; AMX: the tiles and the
  // flash kernel, which multiplies in AMX tiles and sums the scores in fp32.
  CpuKernels k = choose_cpu_kernels(avx512_bf16_cpu(), at::kBFloat16, true, {});
  EXPECT_EQ(k.gemm, GemmPath::kOnednnTiles);
  EXPECT_EQ(k.attention, AttentionPath::kGemmBlocks);
  EXPECT_TRUE(k.bf16_native);
  EXPECT_NE(k.why.find("native bf16: AVX512_BF16"), std::string::npos) << k.why;
  EXPECT_NE(k.why.find("attention: oneDNN GEMM blocks (bf16 on AVX512_BF16 without AMX)"), std::string::npos)
      << k.why;
  k = choose_cpu_kernels(amx_cpu(), at::kBFloat16, true, {});
  EXPECT_EQ(k.gemm, GemmPath::kOnednnTiles);
  EXPECT_EQ(k.attention, AttentionPath::kFusedSdpa);
  EXPECT_TRUE(k.bf16_native);
  EXPECT_NE(k.why.find("native bf16: AMX-BF16"), std::string::npos) << k.why;
  EXPECT_NE(k.why.find("attention: fused SDPA (bf16 on AMX, scores summed in fp32)"), std::string::npos)
      << k.why;
  // AVX-512 without bf16 (Skylake-X, Zen 3 has none at all): emulated, ATen's path, said so.
  CpuFeatures skx = avx2_cpu();
  skx.avx512 = true;
  for (const CpuFeatures& f : {avx2_cpu(), skx}) {
    k = choose_cpu_kernels(f, at::kBFloat16, true, {});
    EXPECT_EQ(k.gemm, GemmPath::kAten);
    EXPECT_EQ(k.attention, AttentionPath::kFusedSdpa);
    EXPECT_FALSE(k.bf16_native);
    EXPECT_NE(k.why.find("bf16 emulated: this CPU (" + f.model + ") has neither AVX512_BF16 nor AMX-BF16"),
              std::string::npos)
        << k.why;
  }
}

TEST(CpuKernelChoice, OnednnsInstructionCapCountsAsTheCpuLackingThem) {
  KernelOverrides o;
  o.onednn_max_isa = "AVX512_CORE_BF16";  // an AMX CPU held to AVX512_BF16 (as a Zen 4 has it)
  CpuKernels k = choose_cpu_kernels(amx_cpu(), at::kBFloat16, true, o);
  EXPECT_EQ(k.gemm, GemmPath::kOnednnTiles);
  EXPECT_EQ(k.attention, AttentionPath::kGemmBlocks);  // the flash kernel without its AMX tiles
  EXPECT_NE(k.why.find("native bf16: AVX512_BF16"), std::string::npos) << k.why;
  o.onednn_max_isa = "avx512_core";  // oneDNN takes its names in any case
  k = choose_cpu_kernels(amx_cpu(), at::kBFloat16, true, o);
  EXPECT_EQ(k.gemm, GemmPath::kAten);
  EXPECT_NE(k.why.find("no native bf16 for oneDNN (under ONEDNN_MAX_CPU_ISA=avx512_core)"), std::string::npos)
      << k.why;
  o.onednn_max_isa = "AVX2";
  o.gemm = "onednn";
  EXPECT_EQ(
      refusal(amx_cpu(), at::kBFloat16, o),
      "H3_CPU_GEMM=onednn: with compute-dtype bf16, this CPU (Intel(R) Xeon(R) Processor) has no AVX-512 "
      "(F, BW, VL and DQ) nor AMX-BF16 (under ONEDNN_MAX_CPU_ISA=AVX2), where LibTorch refuses oneDNN's "
      "bf16 linear; unset it or set it to aten (docs/performance.md, \"The CPU at hand\")");
  // fp32 runs on oneDNN under any cap.
  EXPECT_EQ(choose_cpu_kernels(amx_cpu(), at::kFloat, true, o).gemm, GemmPath::kOnednnTiles);
}

TEST(CpuKernelChoice, AForcedPathIsTakenWhereTheCpuRunsIt) {
  KernelOverrides o;
  o.gemm = "aten";
  o.attention = "sdpa";
  CpuKernels k = choose_cpu_kernels(avx2_cpu(), at::kFloat, true, o);
  EXPECT_EQ(k.gemm, GemmPath::kAten);
  EXPECT_EQ(k.attention, AttentionPath::kFusedSdpa);
  EXPECT_NE(k.why.find("(H3_CPU_GEMM)"), std::string::npos);
  o.gemm = "onednn";
  o.attention = "gemm";
  k = choose_cpu_kernels(amx_cpu(), at::kBFloat16, true, o);
  EXPECT_EQ(k.gemm, GemmPath::kOnednnTiles);
  EXPECT_EQ(k.attention, AttentionPath::kGemmBlocks);
  o.aten_capability = "avx512";
  EXPECT_NO_THROW((void)choose_cpu_kernels(amx_cpu(), at::kFloat, true, o));
}

TEST(CpuKernelChoice, APathTheCpuCannotRunIsRefusedWithTheReason) {
  KernelOverrides o;
  o.gemm = "onednn";
  EXPECT_EQ(refusal(avx2_cpu(), at::kBFloat16, o),
            "H3_CPU_GEMM=onednn: with compute-dtype bf16, this CPU (AMD EPYC 7B13) has no AVX-512 (F, BW, VL "
            "and DQ) nor AMX-BF16, where LibTorch refuses oneDNN's bf16 linear; unset it or set it to aten "
            "(docs/performance.md, \"The CPU at hand\")");
  o = {};
  o.attention = "gemm";
  EXPECT_EQ(
      refusal(avx2_cpu(), at::kBFloat16, o),
      "H3_CPU_ATTENTION=gemm: with compute-dtype bf16, this CPU (AMD EPYC 7B13) has no AVX-512 (F, BW, "
      "VL and DQ) nor AMX-BF16, where LibTorch refuses oneDNN's bf16 linear; unset it or set it to sdpa "
      "(docs/performance.md, \"The CPU at hand\")");
  o = {};
  o.aten_capability = "avx512";
  EXPECT_EQ(
      refusal(avx2_cpu(), at::kFloat, o),
      "ATEN_CPU_CAPABILITY=avx512: this CPU (AMD EPYC 7B13) has no AVX-512 (F, BW, VL and DQ), so ATen's "
      "AVX-512 kernels would stop the process with an illegal instruction; set it to avx2 or default, or "
      "unset it (docs/performance.md, \"The CPU at hand\")");
  // Without oneDNN in LibTorch, fp32 cannot be forced onto it either.
  o = {};
  o.gemm = "onednn";
  try {
    (void)choose_cpu_kernels(amx_cpu(), at::kFloat, false, o);
    ADD_FAILURE() << "not refused";
  } catch (const Error& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "H3_CPU_GEMM=onednn: this LibTorch has no oneDNN fused linears (mkldnn::_linear_pointwise); unset "
        "it or set it to aten (docs/performance.md, \"The CPU at hand\")");
  }
}

TEST(CpuKernelChoice, AnUnknownValueIsRefusedNamingTheVariable) {
  KernelOverrides o;
  o.attention = "flash";
  EXPECT_EQ(refusal(amx_cpu(), at::kFloat, o),
            "H3_CPU_ATTENTION=flash: not an attention path; set it to gemm or sdpa, or unset it (chosen by "
            "the CPU) (docs/performance.md, \"The CPU at hand\")");
  o = {};
  o.gemm = "mkl";
  EXPECT_EQ(refusal(amx_cpu(), at::kFloat, o),
            "H3_CPU_GEMM=mkl: not a GEMM path; set it to onednn or aten, or unset it (chosen by the CPU) "
            "(docs/performance.md, \"The CPU at hand\")");
}

// On this machine: the process's choice decides which kernels the DiT's linears and attention run.
TEST(CpuKernelChoice, TheChoiceReachesTheLinearsAndTheAttention) {
  if (fused_linear_backend() != std::string("oneDNN")) GTEST_SKIP() << "no oneDNN in this LibTorch";
  const at::Tensor x = at::randn({8, 16}), w = at::randn({4, 16});
  const at::Tensor q = at::randn({8, 2, 16});
  {
    CpuKernels k;
    k.gemm = GemmPath::kAten;
    k.attention = AttentionPath::kFusedSdpa;
    const ScopedCpuKernels scoped(at::kFloat, k);
    EXPECT_FALSE(onednn_linear(x, w));
    EXPECT_FALSE(cpu_attention_applies(q, q, q));
  }
  {
    CpuKernels k;
    k.gemm = GemmPath::kOnednnTiles;
    k.attention = AttentionPath::kGemmBlocks;
    const ScopedCpuKernels scoped(at::kFloat, k);
    EXPECT_TRUE(onednn_linear(x, w));
    EXPECT_TRUE(cpu_attention_applies(q, q, q));
    EXPECT_FALSE(onednn_linear(x.to(at::kDouble), w.to(at::kDouble)));
  }
}

// bf16 through the kernels this CPU chooses, and through ATen's path beside them, against fp32
// on both golden forward cases: within 1.6 % of max |v| (the release-precision bound of
// tests/core/dit/golden_test.cpp; measured on the Intel Xeon VM with AMX: docs/performance.md).
TEST(CpuKernelChoice, Bf16StaysWithinTheStatedDistanceOfFp32OnTheGoldenCases) {
  constexpr double kBound = 0.016;  // of max |v|
  const auto dir = dit::testing::golden_dir() + "/transformer_tiny";
  dit::TransformerOptions bf16;
  bf16.dtype = at::kBFloat16;
  const auto fp32_model = dit::Transformer::load(dir);
  const auto bf16_model = dit::Transformer::load(dir, nullptr, bf16);
  CpuKernels aten;  // the path before the choice: ATen's GEMMs, the fused attention
  aten.gemm = GemmPath::kAten;
  aten.attention = AttentionPath::kFusedSdpa;
  for (const char* name : {"tiny_t2_h4w6_L5", "tiny_t7_h6w8_L17"}) {
    const auto c = dit::testing::read_tensors(dit::testing::golden_dir() + "/case_" + name + ".safetensors");
    const auto in = dit::testing::case_inputs(c);
    const auto ref = fp32_model.forward(in);
    const double scale = ref.video.abs().max().item<double>();
    const auto chosen = bf16_model.forward(in);
    dit::Velocity other;
    {
      const ScopedCpuKernels scoped(at::kBFloat16, aten);
      other = bf16_model.forward(in);
    }
    const double dv = dit::testing::max_abs_diff(chosen.video, ref.video),
                 da = dit::testing::max_abs_diff(chosen.audio, ref.audio),
                 dv_aten = dit::testing::max_abs_diff(other.video, ref.video);
    std::printf(
        "case %s: bf16 (%s, %s) vs fp32: max |dv_video| %.4g, max |dv_audio| %.4g; ATen's bf16: %.4g "
        "(max |v| %.3g)\n",
        name, to_string(cpu_kernels(at::kBFloat16).gemm), to_string(cpu_kernels(at::kBFloat16).attention), dv,
        da, dv_aten, scale);
    EXPECT_GT(dv, 0.0) << "bf16 equal to fp32: the dtype never reached the DiT";
    EXPECT_LE(dv, kBound * scale);
    EXPECT_LE(da, kBound * scale);
    EXPECT_LE(dv_aten, kBound * scale);
  }
}

}  // namespace
}  // namespace h3
