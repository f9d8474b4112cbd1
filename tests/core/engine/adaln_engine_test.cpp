// EngineOptions::adaln_tables on the tiny default model: with the tables (the default) every
// request gives bit for bit the clip the AdaLN projections give, whatever its sampler and grid,
// one request after another (a new grid reads the projections again), at 1 and 2 ranks.
#include <gtest/gtest.h>

#include "engine_test_util.h"

namespace h3 {
namespace {

using test::CollectSink;

using test::Clip;

GenerationRequest request(Sampler sampler, int64_t steps) {
  GenerationRequest r;
  r.prompt = "a green square moving down on a white background";
  r.width = 64;
  r.height = 64;
  r.num_frames = 22;
  r.steps = steps;
  r.seed = 5;
  r.sampler = sampler;
  return r;
}

Clip generate(Engine& e, const GenerationRequest& r) {
  return test::generate_clip(e, r);
}

std::unique_ptr<Engine> open(int ranks, bool tables) {
  EngineOptions o;
  o.model_dir = default_model_dir();
  o.ranks = ranks;
  o.adaln_tables = tables;
  o.timeout = std::chrono::seconds(60);
  return Engine::open(o);
}

TEST(AdalnTablesEngine, EveryRequestIsBitForBitTheProjectionsClip) {
  for (int ranks : {1, 2}) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    const auto tables = open(ranks, true), projections = open(ranks, false);
    EXPECT_TRUE(tables->options().adaln_tables);
    // Two grids one after the other (the second reads the projections again), then the causal
    // sampler's, then the first grid again.
    for (const auto& r : {request(Sampler::kEuler, 3), request(Sampler::kEuler, 5),
                          request(Sampler::kCausal, 2), request(Sampler::kEuler, 3)}) {
      SCOPED_TRACE(std::string(to_string(r.sampler)) + " steps " + std::to_string(r.steps));
      const Clip a = generate(*tables, r), b = generate(*projections, r);
      ASSERT_TRUE(a.frames.defined() && b.frames.defined());
      EXPECT_EQ(a.frames.size(0), 22);
      EXPECT_TRUE(at::equal(a.frames, b.frames));
      EXPECT_TRUE(at::equal(a.video, b.video));
      EXPECT_TRUE(at::equal(a.audio, b.audio));
    }
  }
}

}  // namespace
}  // namespace h3
