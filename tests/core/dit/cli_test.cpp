// The DiT's `h3` commands end to end, their output read back: `dit-forward` at TP 2 writes the
// golden case's velocities (within 1e-4), and `inspect --shapes` finds the release checkpoint
// indexes (both layouts) holding exactly the parameter set the release configs build: 638
// tensors, 33.12 B parameters (docs/h3-model.md §2, from the FastVideo port).
#include <gtest/gtest.h>

#include "../../temp_dir.h"
#include "../cli_run.h"
#include "dit_test_util.h"
#include "io/safetensors.h"

namespace h3::dit {
namespace {

using h3::test::CliRun;
using h3::test::run_h3;
using testing::data_dir;
using testing::golden_dir;
using testing::max_abs_diff;
using testing::read_tensors;

std::string q(const std::string& s) {
  return "'" + s + "'";
}

TEST(DitForwardCli, TwoRanksWriteTheGoldenVelocities) {
  const test::TempDir dir("dit-forward");
  const std::string out = dir / "velocities.st";
  const std::string golden_case = golden_dir() + "/case_tiny_t7_h6w8_L17.safetensors";
  const CliRun r = run_h3("dit-forward --transformer " + q(golden_dir() + "/transformer_tiny_native") +
                          " --inputs " + q(golden_case) + " --out " + q(out) + " --ranks 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("(2 ranks"), std::string::npos) << r.output;
  const auto got = read_tensors(out);
  const auto want = read_tensors(golden_case);
  ASSERT_EQ(got.size(), 2u);
  for (const char* name : {"velocity_video", "velocity_audio"}) {
    ASSERT_EQ(got.count(name), 1u) << name << " not written";
    ASSERT_EQ(got.at(name).sizes(), want.at(name).sizes()) << name;
    const double err = max_abs_diff(got.at(name), want.at(name));
    std::printf("h3 dit-forward --ranks 2: max |%s - golden| = %.3g\n", name, err);
    EXPECT_LE(err, 1e-4) << name;
  }
}

TEST(InspectCli, ReleaseIndexesHoldExactlyTheParametersTheConfigsBuild) {
  struct Release {
    const char* config;
    const char* index;
    const char* layout;
  };
  const std::string rel = data_dir() + "/h3-release/";
  for (const Release& c : {Release{"transformer/config.json",
                                   "transformer/diffusion_pytorch_model.safetensors.index.json", "diffusers"},
                           Release{"FL2VA/transformer/config.json",
                                   "FL2VA/transformer/model.safetensors.index.json", "native"}}) {
    SCOPED_TRACE(c.layout);
    const CliRun r = run_h3("inspect --shapes " + q(rel + c.config) + " --index " + q(rel + c.index));
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("50 blocks + 2 refiner blocks, hidden 5376, 56 heads x 128, ffn 14336"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("tensors 638, parameters 33122992896 (33.12 B)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(std::string("(") + c.layout + " layout, "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("): 0 missing, 0 not in the model"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("missing from the index:"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("in the index but not in the model:"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace h3::dit
