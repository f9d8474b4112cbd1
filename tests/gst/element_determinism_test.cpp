// The frames h3videosrc pushes are exactly the engine's: a checksum over the
// element's RGB buffers (visible bytes only, whatever the stride) equals the
// checksum of h3::Engine::generate's own chunks for the same request, on one
// rank and on two (tensor-parallel DiT, spatially split VAE); the same seed
// gives the same frames, another seed other frames.
#include <ATen/ATen.h>
#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <gst/video/video.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "engine/engine.h"
#include "engine/progress.h"
#include "engine/request.h"
#include "gst_test_util.h"
#include "vae/chunk_sink.h"

namespace {

// An odd width: GStreamer pads RGB rows to 4 bytes, the engine does not.
constexpr int kW = 50, kH = 40;
constexpr int64_t kN = 9;

uint64_t fnv1a(uint64_t h, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
constexpr uint64_t kFnvBasis = 1469598103934665603ull;

class HashSink : public h3::ChunkSink {
 public:
  void on_chunk(const h3::Chunk& c) override {
    const at::Tensor t = c.frames.contiguous();
    hash = fnv1a(hash, t.data_ptr<uint8_t>(), static_cast<size_t>(t.numel()));
    frames += t.size(0);
  }
  uint64_t hash = kFnvBasis;
  int64_t frames = 0;
};

uint64_t engine_hash(uint64_t seed, int ranks = 1) {
  h3::EngineOptions o;
  o.model_dir = h3::default_model_dir();
  o.ranks = ranks;
  auto engine = h3::Engine::open(o);
  h3::GenerationRequest r;
  r.prompt = "a red kite";
  r.width = kW;
  r.height = kH;
  r.num_frames = kN;
  r.seed = seed;
  HashSink sink;
  h3::CancelToken cancel;
  engine->generate(r, sink, {}, cancel);
  EXPECT_EQ(sink.frames, kN);
  return sink.hash;
}

uint64_t element_hash(uint64_t seed, int ranks = 1) {
  const std::string l = "h3videosrc prompt=\"a red kite\" width=" + std::to_string(kW) +
                        " height=" + std::to_string(kH) + " num-frames=" + std::to_string(kN) +
                        " seed=" + std::to_string(seed) + " ranks=" + std::to_string(ranks);
  GstHarness* h = gst_harness_new_parse(l.c_str());
  gst_harness_set_sink_caps_str(h, "video/x-raw,format=RGB");
  gst_harness_play(h);
  GstCaps* caps = nullptr;
  uint64_t hash = kFnvBasis;
  for (int64_t i = 0; i < kN; ++i) {
    GstBuffer* b = gst_harness_pull(h);
    EXPECT_NE(b, nullptr);
    if (!b) break;
    if (!caps) caps = gst_pad_get_current_caps(h->sinkpad);
    GstVideoInfo info;
    EXPECT_TRUE(gst_video_info_from_caps(&info, caps));
    GstVideoFrame f;
    EXPECT_TRUE(gst_video_frame_map(&f, &info, b, GST_MAP_READ));
    const auto* px = static_cast<const uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&f, 0));
    const int stride = GST_VIDEO_FRAME_PLANE_STRIDE(&f, 0);
    EXPECT_GT(stride, kW * 3);  // the padding really is there
    for (int y = 0; y < kH; ++y) hash = fnv1a(hash, px + y * stride, kW * 3);
    gst_video_frame_unmap(&f);
    gst_buffer_unref(b);
  }
  if (caps) gst_caps_unref(caps);
  gst_harness_teardown(h);
  return hash;
}

TEST(H3VideoSrcDeterminism, TheElementsFramesAreTheEnginesFrames) {
  EXPECT_EQ(element_hash(5), engine_hash(5));
}

TEST(H3VideoSrcDeterminism, OnTwoRanksTheElementsFramesAreTheTwoRankEnginesFrames) {
  EXPECT_EQ(element_hash(5, 2), engine_hash(5, 2));
}

TEST(H3VideoSrcDeterminism, SameSeedSameFramesOtherSeedOtherFrames) {
  const uint64_t a = element_hash(5);
  EXPECT_EQ(element_hash(5), a);
  EXPECT_NE(element_hash(6), a);
}

}  // namespace
