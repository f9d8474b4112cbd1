// The golden sampling run (tests/data/golden/h3_dit, gen_tiny_124f_96x64_n4): the golden tiny
// transformer and tiny VAE assembled into a model folder, the run's embeddings, size, frames,
// steps and seed; the final latents before decoding match the reference's within 1e-4.
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine_test_util.h"
#include "golden_model.h"
#include "io/safetensors.h"

namespace h3 {
namespace {

TEST(GoldenRun, EngineLatentsMatchTheReference) {
  test::TempDir dir("golden");
  const test::GoldenRun g = test::make_golden_model(dir.str());
  for (int ranks : {1, 2}) {
    EngineOptions o;
    o.model_dir = g.model_dir;
    o.ranks = ranks;
    auto e = Engine::open(o);
    at::Tensor video, audio;
    GenerateExtras x;
    x.on_latents = [&](const at::Tensor& v, const at::Tensor& a) {
      video = v.clone();
      audio = a.clone();
    };
    test::CollectSink sink;
    CancelToken c;
    e->generate(g.request, sink, {}, c, x);
    const auto expected = io::SafetensorsFile::open(g.expected_path);
    const double dv = (video - expected->view("video")).abs().max().item<double>();
    const double da = (audio - expected->view("audio")).abs().max().item<double>();
    std::printf("golden run at %d rank(s): max |video - ref| = %.3g, max |audio - ref| = %.3g\n", ranks, dv,
                da);
    EXPECT_LE(dv, 1e-4);
    EXPECT_LE(da, 1e-4);
    EXPECT_EQ(sink.frames_so_far, 124);
  }
}

}  // namespace
}  // namespace h3
