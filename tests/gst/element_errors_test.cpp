// Bad settings that only the engine can judge: each is an error on the bus
// with a message that says what to fix, never a crash or a hang.
#include <gst/gst.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "../temp_dir.h"
#include "clip_params.h"
#include "gst_test_util.h"

namespace {

h3test::RunResult run(const std::string& props) {
  const std::string l = "h3videosrc num-frames=" + std::to_string(h3test::kFrames) +
                        " width=" + std::to_string(h3test::kWidth) +
                        " height=" + std::to_string(h3test::kHeight) + " " + props + " ! fakesink";
  GError* err = nullptr;
  GstElement* p = gst_parse_launch(l.c_str(), &err);
  EXPECT_EQ(err, nullptr);
  if (err) g_error_free(err);
  h3test::RunResult r = h3test::run_to_end(p, 300);
  gst_object_unref(p);
  return r;
}

TEST(H3VideoSrcErrors, AMissingModelFolderIsResourceNotFoundNamingIt) {
  const h3test::RunResult r = run("model=/nonexistent/h3-model");
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.domain, GST_RESOURCE_ERROR);
  EXPECT_EQ(r.code, GST_RESOURCE_ERROR_NOT_FOUND);
  EXPECT_NE(r.message.find("/nonexistent/h3-model"), std::string::npos) << r.message;
}

TEST(H3VideoSrcErrors, PaceWithTheEulerSamplerIsRefusedWithTheReason) {
  const h3test::RunResult r = run("sampler=euler pace=steps");
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.domain, GST_RESOURCE_ERROR);
  EXPECT_EQ(r.code, GST_RESOURCE_ERROR_SETTINGS);
  EXPECT_EQ(r.message,
            "pace=steps needs sampler=causal: it lowers the forwards per chunk of the chunk-causal sampler, "
            "and the euler sampler denoises the whole clip on one grid. Set sampler=causal, or pace=off");
}

TEST(H3VideoSrcErrors, AFolderWithoutAModelIsAnError) {
  const h3::test::TempDir dir("gst-empty");
  const h3test::RunResult r = run("model=" + dir.str());
  EXPECT_TRUE(r.error);
  EXPECT_EQ(r.domain, GST_RESOURCE_ERROR);
  EXPECT_NE(r.message.find(dir.str()), std::string::npos) << r.message;
}

TEST(H3VideoSrcErrors, UnreadableEmbeddingsAreAnErrorNamingTheFile) {
  const h3::test::TempDir dir("gst-garbage");
  const std::string path = dir / "garbage.safetensors";
  std::ofstream(path) << "this is not a safetensors file";
  const h3test::RunResult r = run("prompt-embeds=" + path);
  EXPECT_TRUE(r.error);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.message.find("garbage.safetensors"), std::string::npos) << r.message;
}

TEST(H3VideoSrcErrors, OneDenoisingStepIsRefusedAsASetting) {
  const h3test::RunResult r = run("steps=1");
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.domain, GST_RESOURCE_ERROR);
  EXPECT_EQ(r.code, GST_RESOURCE_ERROR_SETTINGS);
  EXPECT_NE(r.message.find("step"), std::string::npos) << r.message;
}

// The peak resident memory of this process so far (VmHWM), in bytes.
int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmHWM:") {
      int64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
    std::string rest;
    std::getline(in, rest);
  }
  return -1;
}

// Every value inside the properties' ranges; before the memory guard this request opened the
// model and grew to 24 GB in a minute until the kernel's OOM killer ended the process.
TEST(H3VideoSrcErrors, ARequestThatCannotFitIsRefusedBeforeAnythingLargeIsAllocated) {
  const h3test::RunResult r = run("width=4096 height=4096 num-frames=1024 max-memory=17179869184");
  ASSERT_TRUE(r.error);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.domain, GST_RESOURCE_ERROR);
  EXPECT_EQ(r.code, GST_RESOURCE_ERROR_NO_SPACE_LEFT);
  EXPECT_NE(r.message.find("4096x4096, 1024 frames"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("16.0 GiB is the max-memory limit"), std::string::npos) << r.message;
  // One clip of decode at 4096x4096 is more than 16 GiB already: no length fits, a smaller size does.
  EXPECT_NE(r.message.find("No length fits at 4096x4096"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("at 1024 frames at most "), std::string::npos) << r.message;
  // The tiny model and the plugin: far below one clip's decode at this size (several GiB).
  EXPECT_LT(peak_rss_bytes(), int64_t{2} << 30);
}

// Without max-memory the limit is what the machine has available: on any test machine the
// same request is refused too (it needs far more than 24 GiB), naming where the limit came from.
TEST(H3VideoSrcErrors, WithoutMaxMemoryTheLimitIsTheMemoryAvailable) {
  const h3test::RunResult r = run("width=4096 height=4096 num-frames=1024");
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.code, GST_RESOURCE_ERROR_NO_SPACE_LEFT);
  EXPECT_NE(r.message.find("MemAvailable"), std::string::npos) << r.message;
}

TEST(H3VideoSrcErrors, AMaxMemoryBelowTheDefaultClipsNeedIsRefusedAndAboveItPlays) {
  const h3test::RunResult refused = run("max-memory=1048576");
  ASSERT_TRUE(refused.error);
  EXPECT_EQ(refused.code, GST_RESOURCE_ERROR_NO_SPACE_LEFT);
  EXPECT_NE(refused.message.find("1.0 MiB is the max-memory limit"), std::string::npos) << refused.message;
  const h3test::RunResult played = run("max-memory=4294967296");
  EXPECT_FALSE(played.error) << played.message;
}

// The fit planner, before the model is loaded: 1 MiB per device holds no layout of the tiny
// model's two ranks; the message names the layout asked for, what it needs and what would fit.
TEST(H3VideoSrcErrors, ALayoutThatCannotFitTheDeviceMemoryIsRefusedBeforeLoading) {
  const h3test::RunResult r = run("ranks=2 device-memory=1048576");
  ASSERT_TRUE(r.error);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.domain, GST_RESOURCE_ERROR);
  EXPECT_EQ(r.code, GST_RESOURCE_ERROR_NO_SPACE_LEFT);
  EXPECT_NE(r.message.find("per rank as TP2×SP1 but each device has 1.0 MiB"), std::string::npos)
      << r.message;
  EXPECT_NE(r.message.find("no layout fits in"), std::string::npos) << r.message;
  // Nothing was loaded: the plugin's own memory only (the model's load would show in the RSS).
  const h3test::RunResult played = run("ranks=2 sp-size=2 device-memory=4294967296");
  EXPECT_FALSE(played.error) << played.message;
}

void expect_settings_error(const h3test::RunResult& r, const std::vector<std::string>& says) {
  ASSERT_TRUE(r.error);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.domain, GST_RESOURCE_ERROR);
  EXPECT_EQ(r.code, GST_RESOURCE_ERROR_SETTINGS);
  for (const auto& s : says) EXPECT_NE(r.message.find(s), std::string::npos) << r.message;
}

// Which CUDA refusal applies depends on the build (H3_TEST_TORCH_HAS_CUDA, from meson) and on
// the GPUs the NVIDIA driver shows. A build without CUDA holds its refusal alone (a build with
// CUDA runs it in a CUDA-less build beside it: the meson test build_cuda_less_refusals); a build
// with CUDA holds the two that depend on the GPUs present, each skipped, saying why, on machines
// where it cannot apply.
#if H3_TEST_TORCH_HAS_CUDA
int driver_gpus() {
  int n = 0;
  if (GDir* d = g_dir_open("/proc/driver/nvidia/gpus", 0, nullptr)) {
    while (g_dir_read_name(d)) ++n;
    g_dir_close(d);
  }
  return n;
}

TEST(H3VideoSrcErrors, CudaWithoutAGpuIsRefusedSayingWhatIsMissing) {
  if (driver_gpus() > 0)
    GTEST_SKIP() << driver_gpus() << " GPU(s) present: this refusal is for machines without";
  expect_settings_error(run("device=cuda"),
                        {"device = cuda: no CUDA GPU is usable here", "nvidia-smi", "use cpu"});
}

TEST(H3VideoSrcErrors, MoreCudaRanksThanGpusIsAnError) {
  if (driver_gpus() == 0) GTEST_SKIP() << "no GPU here: device=cuda is refused before counting ranks";
  // One GPU per rank: 64 ranks ask for more GPUs than any machine here has.
  expect_settings_error(run("device=cuda ranks=64"),
                        {"device = cuda with 64 ranks needs 64 GPUs (one per rank) but"});
}
#else
TEST(H3VideoSrcErrors, CudaInABuildWithoutCudaIsRefusedSayingSo) {
  expect_settings_error(run("device=cuda"),
                        {"device = cuda: this build has no CUDA (configure found no CUDA LibTorch or no CUDA "
                         "toolkit with NCCL: see 'LibTorch has CUDA' in meson's summary); use cpu"});
}
#endif

TEST(H3VideoSrcErrors, AnUnknownComputeDtypeIsASettingsErrorNamingTheProperty) {
  expect_settings_error(run("compute-dtype=fp16"), {"compute-dtype = \"fp16\"", "\"fp32\" or \"bf16\""});
}

TEST(H3VideoSrcErrors, TensorParallelSizeThatDoesNotDivideTheRanksIsAnError) {
  const h3test::RunResult r = run("ranks=2 tp-size=3");
  ASSERT_TRUE(r.error);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.domain, GST_RESOURCE_ERROR);
  EXPECT_EQ(r.code, GST_RESOURCE_ERROR_SETTINGS);
  EXPECT_NE(r.message.find("tp-size = 3 x sp-size = 1 with 2 ranks"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("give tp-size = 0 (ranks / sp) or 2"), std::string::npos) << r.message;
}

TEST(H3VideoSrcErrors, SequenceParallelSizeThatDoesNotSplitTheModelIsAnError) {
  // sp must divide the ranks first, then the heads of each TP rank (the test models have 2).
  for (const auto& [props, words] : std::vector<std::pair<std::string, std::string>>{
           {"ranks=2 sp-size=3",
            "sp-size = 3 with 2 ranks: the sequence-parallel size must divide the ranks"},
           {"ranks=3 sp-size=3", "sp must divide the"}}) {
    const h3test::RunResult r = run(props);
    ASSERT_TRUE(r.error) << props;
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.domain, GST_RESOURCE_ERROR) << props;
    EXPECT_NE(r.message.find(words), std::string::npos) << props << ": " << r.message;
  }
}

}  // namespace
