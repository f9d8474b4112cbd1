// The DiT on a GPU against the reference's golden velocities: fp32 within the golden tolerance
// (1e-4) and the release precision (bf16 stream) within a stated bound; TP across the GPUs
// present over NCCL. Skipped, with the reason, where no GPU is usable.
#include <gtest/gtest.h>

#include "common/device.h"
#include "dist/world.h"
#include "dit/transformer.h"
#include "dit_test_util.h"

namespace h3::dit {
namespace {

using testing::case_inputs;
using testing::golden_dir;
using testing::max_abs_diff;
using testing::read_tensors;

#define H3_REQUIRE_GPUS(n)                                                                     \
  if (cuda_device_count() < (n))                                                               \
  GTEST_SKIP() << "needs " << (n) << " CUDA GPU(s), " << cuda_device_count() << " usable here" \
               << " (a CPU-only build, no driver or no GPU)"

Velocity on_gpu(const std::string& layout, at::ScalarType dtype, const DitInputs& in) {
  TransformerOptions o;
  o.device = c10::Device(c10::kCUDA, 0);
  o.dtype = dtype;
  auto v = Transformer::load(golden_dir() + "/" + layout, nullptr, o).forward(in);
  EXPECT_TRUE(v.video.is_cuda());
  return {v.video.to(at::kCPU, at::kFloat), v.audio.to(at::kCPU, at::kFloat)};
}

TEST(Cuda, Fp32ForwardMatchesTheReferenceFromBothLayouts) {
  H3_REQUIRE_GPUS(1);
  for (const char* name : {"case_tiny_t2_h4w6_L5", "case_tiny_t7_h6w8_L17"}) {
    auto c = read_tensors(golden_dir() + "/" + name + ".safetensors");
    for (const char* layout : {"transformer_tiny", "transformer_tiny_native"}) {
      const auto v = on_gpu(layout, at::kFloat, case_inputs(c));
      EXPECT_LE(max_abs_diff(v.video, c.at("velocity_video")), 1e-4) << name << " " << layout;
      EXPECT_LE(max_abs_diff(v.audio, c.at("velocity_audio")), 1e-4) << name << " " << layout;
    }
  }
}

// bf16 keeps 8 significant bits (relative rounding 2^-9 per value); the CPU run of the same
// contract (golden_test.cpp, ReleasePrecision) lands under 1 % of max |v|. cuBLAS accumulates
// bf16 GEMMs in fp32 too but sums in another order, so the bound is 2 % of max |v|: a part of
// the precision contract run in bf16 that should be fp32 (norms, modulation) exceeds it.
TEST(Cuda, Bf16ReleasePrecisionStaysWithinTwoPercentOfTheReference) {
  H3_REQUIRE_GPUS(1);
  auto c = read_tensors(golden_dir() + "/case_tiny_t7_h6w8_L17.safetensors");
  const auto v = on_gpu("transformer_tiny", at::kBFloat16, case_inputs(c));
  const double scale = c.at("velocity_video").abs().max().item<double>();
  const double ev = max_abs_diff(v.video, c.at("velocity_video"));
  const double ea = max_abs_diff(v.audio, c.at("velocity_audio"));
  std::printf("CUDA bf16: max |dv_video| = %.3g, max |dv_audio| = %.3g (max |v| %.3g)\n", ev, ea, scale);
  EXPECT_LE(ev, 0.02 * scale);
  EXPECT_LE(ea, 0.02 * scale);
}

TEST(Cuda, TensorParallelOverNcclAcrossTheGpusMatchesTheReference) {
  H3_REQUIRE_GPUS(2);
  const int n = cuda_device_count() >= 4 ? 2 : cuda_device_count();  // tiny model: 2 heads
  auto c = read_tensors(golden_dir() + "/case_tiny_t7_h6w8_L17.safetensors");
  const DitInputs in = case_inputs(c);
  dist::WorldOptions wo;
  wo.backend = dist::Backend::kNccl;
  Velocity v0;
  const auto results = dist::run_threads(
      n,
      [&](dist::Group& g) {
        TransformerOptions o;
        o.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(g.rank()));
        o.dtype = at::kFloat;
        auto v = Transformer::load(golden_dir() + "/transformer_tiny", &g, o).forward(in);
        const at::Tensor video = v.video.to(at::kCPU, at::kFloat);
        // Every rank ends with the whole velocity.
        EXPECT_LE(max_abs_diff(video, c.at("velocity_video")), 1e-4) << "rank " << g.rank();
        if (g.rank() == 0) v0 = {video, v.audio.to(at::kCPU, at::kFloat)};
      },
      wo);
  for (const auto& r : results) EXPECT_TRUE(r.ok) << "rank " << r.rank << ": " << r.error;
  ASSERT_TRUE(v0.audio.defined());
  EXPECT_LE(max_abs_diff(v0.audio, c.at("velocity_audio")), 1e-4);
}

}  // namespace
}  // namespace h3::dit
