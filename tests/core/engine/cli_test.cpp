// The `h3` command line: generate (y4m read back by ffprobe / gst-discoverer, --save-latents on
// the golden run), make-tiny, inspect, and its errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "engine_test_util.h"
#include "golden_model.h"
#include "io/safetensors.h"

namespace h3 {
namespace {
namespace fs = std::filesystem;

struct Result {
  int code;
  std::string out;  // stdout and stderr together
};

Result sh(const std::string& cmd) {
  Result r{-1, ""};
  std::FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string h3(const std::string& args) {
  return std::string(H3_BIN) + " " + args;
}
std::string q(const std::string& s) {
  return "'" + s + "'";
}

bool have(const char* tool) {
  return sh(std::string("command -v ") + tool).code == 0;
}

TEST(Cli, GenerateWritesAY4mThatFfprobeAndDiscovererReadBack) {
  test::TempDir d("cli");
  const std::string out = d / "clip.y4m";
  const std::string cmd =
      h3("generate --prompt 'a small test' --width 80 --height 48 --frames 30 --steps 3 --seed 9 "
         "--ranks 2 --out " +
         q(out) + " --save-latents " + q(d / "lat.safetensors"));
  const Result g = sh(cmd);
  ASSERT_EQ(g.code, 0) << g.out;
  EXPECT_THAT(g.out, ::testing::HasSubstr("denoising"));  // progress, plain lines when not a terminal
  EXPECT_EQ(fs::file_size(out),
            std::string("YUV4MPEG2 W80 H48 F24:1 Ip A1:1 C444\n").size() + 30 * (6 + 3 * 80 * 48));
  const auto lat = io::SafetensorsFile::open(d / "lat.safetensors");
  EXPECT_EQ(lat->info("video").shape, (std::vector<int64_t>{1, 24, 12, 4, 6}));
  EXPECT_EQ(lat->info("audio").shape, (std::vector<int64_t>{130, 32}));

  bool checked = false;
  if (have("ffprobe")) {
    const Result p =
        sh("ffprobe -v error -count_frames -select_streams v:0 -show_entries "
           "stream=width,height,r_frame_rate,nb_read_frames -of default=noprint_wrappers=1 " +
           q(out));
    ASSERT_EQ(p.code, 0) << p.out;
    EXPECT_THAT(p.out, ::testing::HasSubstr("width=80"));
    EXPECT_THAT(p.out, ::testing::HasSubstr("height=48"));
    EXPECT_THAT(p.out, ::testing::HasSubstr("r_frame_rate=24/1"));
    EXPECT_THAT(p.out, ::testing::HasSubstr("nb_read_frames=30"));
    checked = true;
  }
  if (have("gst-discoverer-1.0")) {
    const Result p = sh("gst-discoverer-1.0 -v " + q(out));
    ASSERT_EQ(p.code, 0) << p.out;
    EXPECT_THAT(p.out, ::testing::HasSubstr("Width: 80"));
    EXPECT_THAT(p.out, ::testing::HasSubstr("Height: 48"));
    EXPECT_THAT(p.out, ::testing::HasSubstr("Frame rate: 24/1"));
    EXPECT_THAT(p.out, ::testing::HasSubstr("Duration: 0:00:01.250000000"));  // 30 frames at 24 fps
    checked = true;
  }
  if (!checked) GTEST_SKIP() << "neither ffprobe nor gst-discoverer-1.0 is installed";
}

TEST(Cli, GoldenRunSavesLatentsWithin1e4OfTheReference) {
  test::TempDir d("cli");
  const test::GoldenRun g = test::make_golden_model(d.str());
  const Result r = sh(h3("generate --model " + q(g.model_dir) + " --embeds " + q(g.embeds_path) +
                         " --width 96 --height 64 --frames 124 --steps 4 --seed 42 --quiet --out " +
                         q(d / "g.y4m") + " --save-latents " + q(d / "g.safetensors")));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto got = io::SafetensorsFile::open(d / "g.safetensors");
  const auto want = io::SafetensorsFile::open(g.expected_path);
  const double dv = (got->view("video") - want->view("video")).abs().max().item<double>();
  const double da = (got->view("audio") - want->view("audio")).abs().max().item<double>();
  std::printf("h3 generate golden run: max |video - ref| = %.3g, max |audio - ref| = %.3g\n", dv, da);
  EXPECT_LE(dv, 1e-4);
  EXPECT_LE(da, 1e-4);
}

TEST(Cli, BadInputsAreClearErrors) {
  test::TempDir d("cli");
  const std::string out = " --out " + q(d / "x.y4m");
  auto fails = [&](const std::string& args, const std::string& needle) {
    const Result r = sh(h3(args));
    EXPECT_NE(r.code, 0) << args;
    EXPECT_THAT(r.out, ::testing::HasSubstr(needle)) << args;
  };
  fails("generate --model " + q(d / "none") + " --prompt x" + out, d / "none");
  fails("generate --prompt x --steps 1" + out, "steps = 1");
  fails("generate --prompt x --width 8" + out, "width = 8");
  fails("generate --prompt x --frames 2000" + out, "frames");
  fails("generate --prompt x --ranks 3" + out, "tensor-parallel size 3 does not divide the attention heads");
  fails("generate --prompt x --bogus 1" + out, "bogus");
  fails("generate --prompt x --out " + q(d / "no/dir/x.y4m"), "no/dir/x.y4m");
}

TEST(Cli, MakeTinyIsDeterministicAndInspectReadsIt) {
  test::TempDir d("cli");
  ASSERT_EQ(sh(h3("make-tiny --out " + q(d / "a") + " --seed 3")).code, 0);
  ASSERT_EQ(sh(h3("make-tiny --out " + q(d / "b") + " --seed 3 --quiet")).code, 0);
  EXPECT_EQ(sh("diff -r " + q(d / "a") + " " + q(d / "b")).code, 0);
  const Result i = sh(h3("inspect " + q(d / "a") + " --tp 2"));
  ASSERT_EQ(i.code, 0) << i.out;
  EXPECT_THAT(i.out, ::testing::HasSubstr("transformer"));
  EXPECT_THAT(i.out, ::testing::HasSubstr("tp 2"));
  const Result f = sh(h3("inspect " + q(d / "a/vae/diffusion_pytorch_model.safetensors")));
  ASSERT_EQ(f.code, 0) << f.out;
  EXPECT_THAT(f.out, ::testing::HasSubstr("F32"));
}

}  // namespace
}  // namespace h3
