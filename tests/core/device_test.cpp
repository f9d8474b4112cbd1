// Device names and the CUDA checks: what a user gets for a device this build or machine
// cannot serve. On a machine without a GPU the CUDA answers are the refusals; where GPUs are
// present, the index checks.
#include "common/device.h"

#include <gtest/gtest.h>

#include "../error_of.h"
#include "h3/error.h"
#include "h3_config.h"

namespace h3 {
namespace {

std::string refusal(const std::function<void()>& f) {
  return test::error_of(f, ErrorKind::kInvalidArgument);
}

TEST(Device, CpuIsAlwaysThere) {
  EXPECT_EQ(parse_device("cpu", "--device"), c10::Device(c10::kCPU));
}

TEST(Device, MalformedNamesSayWhatIsAccepted) {
  for (const char* bad : {"gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cuda:1234", "cpu:0", ""}) {
    const std::string m = refusal([&] { parse_device(bad, "--device"); });
    EXPECT_NE(m.find("--device = \"" + std::string(bad) + "\""), std::string::npos) << m;
    EXPECT_NE(m.find("cpu, cuda or cuda:K"), std::string::npos) << m;
  }
}

TEST(Device, CudaWithoutAGpuSaysWhatIsMissing) {
  if (cuda_device_count() > 0) GTEST_SKIP() << cuda_device_count() << " GPU(s) visible: no refusal to check";
  for (const char* name : {"cuda", "cuda:0", "cuda:3"}) {
    const std::string m = refusal([&] { parse_device(name, "device property"); });
    EXPECT_EQ(m.rfind("device property = cuda: ", 0), 0u) << m;
    if (H3_TORCH_HAS_CUDA) {
      EXPECT_NE(m.find("no CUDA GPU is usable here"), std::string::npos) << m;
      EXPECT_NE(m.find("nvidia-smi"), std::string::npos) << m;
    } else {
      EXPECT_NE(m.find("this build has no CUDA"), std::string::npos) << m;
    }
    EXPECT_NE(m.find("use cpu"), std::string::npos) << m;
  }
  EXPECT_NE(refusal([] { require_cuda_devices(2, "device"); }).find("device = cuda"), std::string::npos);
}

TEST(Device, GpuIndicesAndRankCountsAreCheckedAgainstThoseVisible) {
  const int n = cuda_device_count();
  if (n == 0) GTEST_SKIP() << "no GPU visible: index checks need one";
  EXPECT_EQ(parse_device("cuda", "--device"), c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(parse_device("cuda:" + std::to_string(n - 1), "--device"),
            c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(n - 1)));
  const std::string beyond = refusal([&] { parse_device("cuda:" + std::to_string(n), "--device"); });
  EXPECT_NE(beyond.find("there is no GPU " + std::to_string(n)), std::string::npos) << beyond;
  EXPECT_NE(beyond.find(std::to_string(n) + " visible"), std::string::npos) << beyond;
  require_cuda_devices(n, "device");
  const std::string ranks = refusal([&] { require_cuda_devices(n + 1, "device"); });
  EXPECT_NE(ranks.find("needs " + std::to_string(n + 1) + " GPUs (one per rank) but " + std::to_string(n) +
                       " are visible"),
            std::string::npos)
      << ranks;
}

}  // namespace
}  // namespace h3
