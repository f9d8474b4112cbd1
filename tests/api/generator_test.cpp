// h3::Generator (include/h3/generator.h), the public API, as an application uses it: this program
// includes nothing but include/h3/ and links libh3-engine alone (no LibTorch, no core header).
// One generate() call takes the plan, the chunk callback, the progress, the StreamControl and both
// observers together; a consumer that stops, a missing callback and a plan of another request are
// refused with the kind and words an application can act on. The random tiny model ($H3_MODEL_DIR).
#include "h3/generator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace {

h3::Generator& generator() {
  static const std::unique_ptr<h3::Generator> g = h3::Generator::open(h3::EngineOptions{});
  return *g;
}

h3::GenerationRequest small(int64_t frames) {
  h3::GenerationRequest r;
  r.prompt = "a red circle moving right on a black background";
  r.width = 80;
  r.height = 48;
  r.num_frames = frames;
  r.steps = 3;
  r.seed = 5;
  return r;
}

TEST(Generator, OneCallTakesThePlanTheObserversAndTheChunkCallbackTogether) {
  const h3::GenerationRequest req = small(22);
  const h3::ClipPlan plan = generator().plan(req);
  int64_t frames = 0, latents_calls = 0, done = 0;
  std::vector<int64_t> first_frames;
  h3::Latents latents;
  h3::GenerateCall call;
  call.plan = &plan;
  call.on_chunk = [&](h3::FrameChunk&& c) {
    EXPECT_EQ(c.width, 80);
    EXPECT_EQ(c.height, 48);
    EXPECT_EQ(c.first_frame, frames);
    first_frames.push_back(c.first_frame);
    frames += c.count;
    return true;
  };
  call.on_latents = [&](const h3::Latents& l) {
    ++latents_calls;
    latents = l;
  };
  call.on_progress = [&](const h3::Progress& p) { done += p.phase == h3::Phase::kDone; };
  generator().generate(req, call);
  EXPECT_EQ(frames, 22);
  EXPECT_EQ(frames, plan.num_frames);
  EXPECT_EQ(latents_calls, 1);
  EXPECT_EQ(done, 1);
  ASSERT_EQ(latents.video_shape.size(), 5u);
  EXPECT_EQ(latents.video_shape[0], 1);
  EXPECT_EQ(latents.video_shape[2], plan.latent_frames);
  EXPECT_EQ(latents.video_shape[3], plan.canvas_height / 16);
  EXPECT_EQ(latents.video_shape[4], plan.canvas_width / 16);
  int64_t n = 1;
  for (int64_t d : latents.video_shape) n *= d;
  EXPECT_EQ(static_cast<int64_t>(latents.video.size()), n);
}

TEST(Generator, ACausalStreamReportsWhatItHoldsAfterEachChunk) {
  h3::GenerationRequest req = small(39);  // three 17-frame chunks, trimmed to 39
  req.sampler = h3::Sampler::kCausal;
  req.steps = 0;
  const h3::ClipPlan plan = generator().plan(req);
  std::vector<int64_t> held_chunks;
  int64_t frames = 0;
  h3::StreamControl control;
  h3::GenerateCall call;
  call.control = &control;
  call.on_chunk = [&](h3::FrameChunk&& c) {
    frames += c.count;
    return true;
  };
  call.on_causal_chunk = [&](const h3::CausalHeld& h) { held_chunks.push_back(h.chunk); };
  generator().generate(req, call);
  EXPECT_EQ(frames, 39);
  std::vector<int64_t> want;
  for (int64_t c = 0; c < plan.causal_chunks; ++c) want.push_back(c);
  EXPECT_EQ(held_chunks, want);
}

TEST(Generator, AConsumerThatStopsCancelsTheRequest) {
  int64_t chunks = 0;
  h3::GenerateCall call;
  call.on_chunk = [&](h3::FrameChunk&&) { return ++chunks < 1; };
  try {
    generator().generate(small(39), call);
    FAIL() << "generate() returned after on_chunk returned false";
  } catch (const h3::Error& e) {
    EXPECT_EQ(e.kind(), h3::ErrorKind::kCancelled) << e.what();
    EXPECT_NE(std::string(e.what()).find("the application's on_chunk stopped taking frames"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(chunks, 1);
  EXPECT_EQ(generator().requests_in_flight(), 0);
}

TEST(Generator, ACallWithoutAChunkCallbackIsRefused) {
  try {
    generator().generate(small(22), h3::GenerateCall{});
    FAIL() << "generate() ran without on_chunk";
  } catch (const h3::Error& e) {
    EXPECT_EQ(e.kind(), h3::ErrorKind::kInvalidArgument);
    EXPECT_STREQ(e.what(), "generate: GenerateCall::on_chunk is empty: the frames would go nowhere");
  }
}

TEST(Generator, APlanOfAnotherRequestIsRefused) {
  const h3::ClipPlan other = generator().plan(small(39));
  h3::GenerateCall call;
  call.plan = &other;
  call.on_chunk = [](h3::FrameChunk&&) { return true; };
  try {
    generator().generate(small(22), call);
    FAIL() << "generate() took the plan of a 39-frame request for a 22-frame one";
  } catch (const h3::Error& e) {
    EXPECT_EQ(e.kind(), h3::ErrorKind::kInternal);
    EXPECT_NE(std::string(e.what()).find("not plan()'s for this request"), std::string::npos) << e.what();
  }
}

TEST(Generator, AMissingModelFolderIsNamed) {
  h3::EngineOptions o;
  o.model_dir = "/nonexistent/h3-model";
  try {
    h3::Generator::open(o);
    FAIL() << "opened a model folder that is not there";
  } catch (const h3::Error& e) {
    EXPECT_EQ(e.kind(), h3::ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/h3-model"), std::string::npos) << e.what();
  }
}

}  // namespace
