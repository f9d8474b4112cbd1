// What a build without CUDA says when it is asked for CUDA or NCCL: configured with
// -Dwith_cuda=disabled, or where configure found no CUDA LibTorch or no CUDA toolkit with NCCL
// (docs/building.md). Compiled only into such a build: in a build with CUDA the meson test
// build_cuda_less_refusals configures one beside it (tests/build/cuda_less_test.sh) and runs these
// there, with the element's own refusal (H3VideoSrcErrors.CudaInABuildWithoutCudaIsRefusedSayingSo).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "../error_of.h"
#include "common/device.h"
#include "dist/world.h"
#include "h3/error.h"
#include "h3_config.h"

static_assert(!H3_TORCH_HAS_CUDA, "only a build without CUDA holds these refusals");

namespace h3 {
namespace {

std::string refusal(const std::function<void()>& f) {
  return test::error_of(f, ErrorKind::kInvalidArgument);
}

const std::string kNoCuda =
    " = cuda: this build has no CUDA (configure found no CUDA LibTorch or no CUDA toolkit with NCCL: see "
    "'LibTorch has CUDA' in meson's summary); use cpu";

TEST(CudaLessBuild, CudaIsRefusedSayingThisBuildHasNoneWhateverGpusTheMachineHas) {
  EXPECT_EQ(cuda_device_count(), 0);
  for (const char* name : {"cuda", "cuda:0", "cuda:3"}) {
    EXPECT_EQ(refusal([&] { parse_device(name, "device property"); }), "device property" + kNoCuda) << name;
  }
  EXPECT_EQ(refusal([] { require_cuda_devices(2, "device"); }), "device" + kNoCuda);
}

TEST(CudaLessBuild, NcclIsRefusedSayingThisBuildHasNone) {
  EXPECT_FALSE(dist::has_nccl());
  dist::WorldOptions o;
  o.backend = dist::Backend::kNccl;
  o.timeout = std::chrono::seconds(10);
  EXPECT_EQ(refusal([&] {
              dist::run_threads(
                  2, [](dist::Group&) {}, o);
            }),
            "this build has no NCCL backend (it needs NCCL and a CUDA LibTorch at build time); use gloo");
}

}  // namespace
}  // namespace h3
