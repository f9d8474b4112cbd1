// `h3 decode` end to end: the golden latents through the command line.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "../../temp_dir.h"
#include "../cli_run.h"
#include "io/safetensors.h"

namespace {

namespace fs = std::filesystem;

std::string golden(const std::string& rel) {
  const char* root = std::getenv("H3_TEST_DATA");
  return std::string(root ? root : "tests/data") + "/golden/h3_vae/" + rel;
}

using h3::test::CliRun;
using h3::test::run_h3;

class DecodeCli : public ::testing::Test {
 protected:
  const h3::test::TempDir dir_{"decode"};
  const fs::path out_ = dir_ / "out.st";
};

TEST_F(DecodeCli, DecodesTheGoldenCaseOnTwoRanks) {
  const CliRun r = run_h3("decode --vae '" + golden("native") + "' --latents '" +
                          golden("case_t12_h8w12.safetensors") + "' --out '" + out_.string() + "' --ranks 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("chunk 3/3"), std::string::npos) << r.output;  // progress on stderr
  const auto got = h3::io::SafetensorsFile::open(out_.string());
  const auto want = h3::io::SafetensorsFile::open(golden("case_t12_h8w12.safetensors"));
  const at::Tensor u8 = got->view("frames");
  ASSERT_EQ(u8.scalar_type(), at::kByte);
  ASSERT_EQ(u8.sizes(), want->view("frames_u8").sizes());
  EXPECT_LE((u8.to(at::kInt) - want->view("frames_u8").to(at::kInt)).abs().max().item<int>(), 1);
  const at::Tensor f32 = got->view("frames_f32");
  ASSERT_EQ(f32.scalar_type(), at::kFloat);
  EXPECT_LE((f32 - want->view("frames_f32")).abs().max().item<double>(), 1e-4);
  EXPECT_EQ(got->metadata().at("chunk_frames"), "17,17,5");
}

TEST_F(DecodeCli, UsageAndInputErrors) {
  CliRun r = run_h3("decode --latents x --out y");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--vae"), std::string::npos) << r.output;
  r = run_h3("decode --vae /no/such/vae --latents '" + golden("case_t12_h8w12.safetensors") + "' --out '" +
             out_.string() + "'");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("/no/such/vae"), std::string::npos) << r.output;
  r = run_h3("decode --vae '" + golden("diffusers") + "' --latents '" +
             golden("diffusers/diffusion_pytorch_model.safetensors") + "' --out '" + out_.string() + "'");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("latents"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out_));
}

}  // namespace
