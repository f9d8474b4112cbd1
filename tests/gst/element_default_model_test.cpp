// h3src on the trained default model (data/default, train/tiny), once through the element as a user
// runs it: the prompt's colour dominates the frames, the shape moves the prompted way, and the audio
// pad carries the shape's tone at a moderate level, not noise (tests/clip_check.h; the engine-level
// test of the same checks over six prompts is tests/core/engine/default_model_test.cpp); and
// h3videosrc without a prompt draws its default prompt.
#include <gst/gst.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "../clip_check.h"
#include "gst_test_util.h"
#include "h3_config.h"

namespace {

// The bytes of every buffer that reaches a sink's pad.
struct Bytes {
  std::mutex m;
  std::vector<uint8_t> data;
  static GstPadProbeReturn probe(GstPad*, GstPadProbeInfo* info, gpointer self_) {
    auto* self = static_cast<Bytes*>(self_);
    GstMapInfo map;
    GstBuffer* b = GST_PAD_PROBE_INFO_BUFFER(info);
    if (gst_buffer_map(b, &map, GST_MAP_READ)) {
      std::lock_guard<std::mutex> lock(self->m);
      self->data.insert(self->data.end(), map.data, map.data + map.size);
      gst_buffer_unmap(b, &map);
    }
    return GST_PAD_PROBE_OK;
  }
};

void keep_bytes(GstElement* pipeline, const char* sink, Bytes* into) {
  GstElement* e = h3test::by_name(pipeline, sink);
  ASSERT_NE(e, nullptr) << sink;
  GstPad* pad = gst_element_get_static_pad(e, "sink");
  gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER, &Bytes::probe, into, nullptr);
  gst_object_unref(pad);
  gst_object_unref(e);
}

// The model's default clip (256 x 160, 48 frames of RGB) shows a red circle moving right on black.
void expect_a_red_circle_moving_right(const std::vector<uint8_t>& rgb) {
  constexpr int64_t kW = 256, kH = 160, kFrames = 48;
  ASSERT_EQ(rgb.size(), static_cast<size_t>(kW * kH * 3 * kFrames));
  const auto look = h3test::look_at_clip(rgb.data(), kFrames, kW, kH, "black");
  const auto [dx, dy] = look.motion();
  EXPECT_GE(look.colour_share("red"), 0.9);
  EXPECT_GE(dx, 24.0) << "centroid moved (" << dx << ", " << dy << ") px";
  EXPECT_LT(std::abs(dy), dx / 2) << "centroid moved (" << dx << ", " << dy << ") px";
}

TEST(H3SrcDefaultModel, TheClipShowsAndSoundsAsPrompted) {
  const std::string launch = std::string("h3src name=s model=") + H3_BUILD_MODEL_DIR +
                             " prompt=\"a red circle moving right on a black background\" seed=1 "
                             "s.video ! videoconvert ! video/x-raw,format=RGB ! fakesink name=v sync=false "
                             "s.audio ! audioconvert ! audio/x-raw,format=F32LE,channels=2 ! "
                             "fakesink name=a sync=false";
  GError* err = nullptr;
  GstElement* p = gst_parse_launch(launch.c_str(), &err);
  ASSERT_EQ(err, nullptr) << err->message;
  Bytes video, audio;
  keep_bytes(p, "v", &video);
  keep_bytes(p, "a", &audio);
  const h3test::RunResult r = h3test::run_to_end(p, 600);
  gst_object_unref(p);
  ASSERT_TRUE(r.eos) << r.message << " " << r.debug;

  // The model's defaults: 256 x 160, 48 frames, 32 kHz stereo.
  expect_a_red_circle_moving_right(video.data);
  ASSERT_GT(audio.data.size(), 0u);
  const auto sound = h3test::listen_to(reinterpret_cast<const float*>(audio.data.data()),
                                       static_cast<int64_t>(audio.data.size() / 8), 32000.0);
  EXPECT_NEAR(sound.peak_hz, 440.0, 10.0) << "a circle's tone (train/tiny/data.py)";
  EXPECT_GT(sound.rms, 0.03);
  EXPECT_LT(sound.rms, 0.3);
  EXPECT_LT(sound.peak, 0.7);
}

// Without a prompt, the element asks for what its default model draws (gst/settings.h,
// kDefaultPrompt): a red circle moving right on a black background.
TEST(H3VideoSrcDefaultModel, TheDefaultPromptIsOneTheDefaultModelDraws) {
  const std::string launch = std::string("h3videosrc model=") + H3_BUILD_MODEL_DIR +
                             " seed=1 ! videoconvert ! video/x-raw,format=RGB ! fakesink name=v sync=false";
  GError* err = nullptr;
  GstElement* p = gst_parse_launch(launch.c_str(), &err);
  ASSERT_EQ(err, nullptr) << err->message;
  Bytes video;
  keep_bytes(p, "v", &video);
  const h3test::RunResult r = h3test::run_to_end(p, 600);
  gst_object_unref(p);
  ASSERT_TRUE(r.eos) << r.message << " " << r.debug;
  expect_a_red_circle_moving_right(video.data);
}

}  // namespace
