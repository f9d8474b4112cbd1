// GStreamer initialises in a gtest binary and GstHarness delivers raw video
// with the negotiated caps: the ground the h3videosrc tests stand on.
#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <gst/video/video.h>
#include <gtest/gtest.h>

namespace {
class GstEnv : public ::testing::Environment {
 public:
  void SetUp() override { gst_init(nullptr, nullptr); }
};
const auto* const kGstEnv = ::testing::AddGlobalTestEnvironment(new GstEnv);
}  // namespace

TEST(GstHarness, VideotestsrcDeliversRgbFramesWithCaps) {
  GstHarness* h = gst_harness_new_parse(
      "videotestsrc num-buffers=3 ! capsfilter "
      "caps=video/x-raw,format=RGB,width=64,height=48,framerate=24/1");
  ASSERT_NE(h, nullptr);
  gst_harness_play(h);
  for (int i = 0; i < 3; ++i) {
    GstBuffer* buf = gst_harness_pull(h);
    ASSERT_NE(buf, nullptr);
    EXPECT_EQ(gst_buffer_get_size(buf), 64u * 48u * 3u);  // RGB rows of 192 bytes need no padding
    EXPECT_EQ(GST_BUFFER_PTS(buf), gst_util_uint64_scale(i, GST_SECOND, 24));
    gst_buffer_unref(buf);
  }
  GstCaps* caps = gst_pad_get_current_caps(h->sinkpad);
  ASSERT_NE(caps, nullptr);
  GstVideoInfo info;
  ASSERT_TRUE(gst_video_info_from_caps(&info, caps));
  EXPECT_EQ(GST_VIDEO_INFO_FORMAT(&info), GST_VIDEO_FORMAT_RGB);
  EXPECT_EQ(GST_VIDEO_INFO_WIDTH(&info), 64);
  EXPECT_EQ(GST_VIDEO_INFO_FPS_N(&info), 24);
  gst_caps_unref(caps);
  gst_harness_teardown(h);
}
