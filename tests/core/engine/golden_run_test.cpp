// The golden sampling run (tests/data/golden/h3_dit, gen_tiny_124f_96x64_n4): the golden tiny
// transformer and tiny VAE assembled into a model folder, the run's embeddings, size, frames,
// steps and seed; the final latents before decoding match the reference's within 1e-4, and the
// frames the sink receives match the golden latents decoded by the golden-checked VAE decoder
// (core_vae_golden) within its tolerance: uint8 +-1 in at most 0.1 % of the values. At 2 ranks
// the request is cropped and trimmed (same canvas and latents): the sink gets the reference's
// first frames, top-left.
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine_test_util.h"
#include "golden_model.h"
#include "io/safetensors.h"
#include "vae/video_decoder.h"

namespace h3 {
namespace {

TEST(GoldenRun, EngineLatentsAndFramesMatchTheReference) {
  test::TempDir dir("golden");
  const test::GoldenRun g = test::make_golden_model(dir.str());
  const auto expected = io::SafetensorsFile::open(g.expected_path);
  // The reference frames: the golden latents through the golden-checked decoder, whole clip.
  const at::Tensor reference =
      vae::VideoDecoder::load(std::string(std::getenv("H3_TEST_DATA")) + "/golden/h3_vae/diffusers")
          .decode(expected->view("video").clone())
          .frames;
  ASSERT_EQ(reference.sizes(), (std::vector<int64_t>{124, 64, 96, 3}));

  struct Run {
    int ranks;
    int64_t width, height, frames;
  };
  // 120 frames of the 124 generated (17n+5): trimmed at the end; 90x60 of the 96x64 canvas:
  // cropped to the top-left. The canvas and latent count are the golden run's, so are the latents.
  for (const Run run : {Run{1, 96, 64, 124}, Run{2, 90, 60, 120}}) {
    SCOPED_TRACE(std::to_string(run.ranks) + " rank(s), " + std::to_string(run.width) + "x" +
                 std::to_string(run.height) + ", " + std::to_string(run.frames) + " frames");
    EngineOptions o;
    o.model_dir = g.model_dir;
    o.ranks = run.ranks;
    auto e = Engine::open(o);
    GenerationRequest req = g.request;
    req.width = run.width;
    req.height = run.height;
    req.num_frames = run.frames;
    at::Tensor video, audio;
    GenerateExtras x;
    x.on_latents = [&](const at::Tensor& v, const at::Tensor& a) {
      video = v.clone();
      audio = a.clone();
    };
    test::CollectSink sink;
    StreamControl c;
    e->generate(req, sink, {}, c, x);
    const double dv = (video - expected->view("video")).abs().max().item<double>();
    const double da = (audio - expected->view("audio")).abs().max().item<double>();
    EXPECT_LE(dv, 1e-4);
    EXPECT_LE(da, 1e-4);
    ASSERT_EQ(sink.frames_so_far, run.frames);
    const at::Tensor got = sink.all();
    const at::Tensor want =
        reference.narrow(0, 0, run.frames).narrow(1, 0, run.height).narrow(2, 0, run.width);
    ASSERT_EQ(got.sizes(), want.sizes());
    const at::Tensor diff = (got.to(at::kInt) - want.to(at::kInt)).abs();
    const int max_diff = diff.max().item<int>();
    const int64_t off = diff.gt(0).sum().item<int64_t>();
    std::printf(
        "golden run at %d rank(s): max |video - ref| = %.3g, max |audio - ref| = %.3g; frames: "
        "max |diff| %d, off by one: %lld of %lld\n",
        run.ranks, dv, da, max_diff, static_cast<long long>(off), static_cast<long long>(diff.numel()));
    // The VAE golden tolerance (core_vae_golden): off by at most one, in at most 0.1 % of the
    // values (the latents differ from the reference by up to 1e-4: a few round the other way).
    EXPECT_LE(max_diff, 1);
    EXPECT_LE(static_cast<double>(off), 0.001 * static_cast<double>(diff.numel()));
  }
}

}  // namespace
}  // namespace h3
