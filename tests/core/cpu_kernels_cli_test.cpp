// The CPU kernel choice at the command line: `h3 bench cpu` prints the CPU, its features and the
// kernels chosen; a forced path the CPU cannot run or does not know stops `h3 generate` and
// `h3 bench cpu` with the reason and an exit status, before any work (never a crash).
#include <gtest/gtest.h>

#include <string>

#include "cli_run.h"
#include "common/cpu_kernels.h"

namespace h3 {
namespace {

using test::CliRun;
using test::run_h3;

TEST(CpuKernelsCli, BenchCpuPrintsTheCpuItsFeaturesAndTheKernels) {
  const CliRun r =
      run_h3("bench cpu --no-forward --repeat 1 --threads 1 --frames 7 --latent-height 4 --latent-width 4");
  ASSERT_EQ(r.code, 0) << r.output;
  const CpuFeatures& f = cpu_features();
  const char* vendor = f.vendor == CpuVendor::kIntel ? "Intel"
                       : f.vendor == CpuVendor::kAmd ? "AMD"
                                                     : "other";
  EXPECT_NE(r.output.find("h3 bench cpu: " + f.model + " (" + vendor + ", family " +
                          std::to_string(f.family) + "), "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("features: " + describe_features(f) + ";"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kernels: " + describe_cpu_kernels() + "\n"), std::string::npos) << r.output;
  for (const char* row : {"fp32  linears, engine", "fp32  attention, engine", "bf16  linears, engine",
                          "bf16  attention, engine", "bf16 / fp32 rate: linears "}) {
    EXPECT_NE(r.output.find(row), std::string::npos) << row << "\n" << r.output;
  }
}

TEST(CpuKernelsCli, AnUnknownForcedPathStopsGenerateWithTheReason) {
  const CliRun r =
      run_h3("generate --prompt x --frames 5 --steps 2 --out /dev/null --quiet", "H3_CPU_ATTENTION=flash");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.code, -1) << "killed by a signal: " << r.output;
  EXPECT_NE(
      r.output.find("H3_CPU_ATTENTION=flash: not an attention path; set it to gemm or sdpa, or unset it"),
      std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("wrote"), std::string::npos) << r.output;
}

TEST(CpuKernelsCli, AForcedPathTheCpuCannotRunStopsBenchCpuWithTheReason) {
  // bf16 through oneDNN needs AVX-512 or AMX-BF16; on a CPU with them, an unknown GEMM path stands
  // in for the refusal (the refusal texts per CPU are CpuKernelChoice's).
  const CpuFeatures& f = cpu_features();
  const bool can = f.avx512 || f.amx_bf16;
  const CliRun r =
      run_h3("bench cpu --no-forward --repeat 1", can ? "H3_CPU_GEMM=mkl" : "H3_CPU_GEMM=onednn");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.code, -1) << "killed by a signal: " << r.output;
  EXPECT_NE(
      r.output.find(can ? "H3_CPU_GEMM=mkl: not a GEMM path" : "H3_CPU_GEMM=onednn: with compute-dtype bf16"),
      std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("linears, engine"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace h3
