// Endless causal streams in the elements (docs/causal.md "Live"): h3src with sampler=causal and
// num-frames -1 never ends by itself; an application EOS ends both pads after whole chunks with
// the soundtrack up to their last frame; a prompt changed while it plays (the `h3-prompt` event
// with a running time, or the `prompt` property) lands at a chunk boundary, says so on the bus
// (`h3-prompt-applied`), and gives the frames of the same timeline given up front.
#include <gst/app/gstappsink.h>
#include <gst/gst.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gst_test_util.h"

namespace {

constexpr int kWidth = 80, kHeight = 48;

struct Pipeline {
  GstElement* pipeline = nullptr;
  GstElement* src = nullptr;
  GstAppSink* video = nullptr;
  GstAppSink* audio = nullptr;
  explicit Pipeline(const std::string& props) {
    const std::string desc = "h3src name=s sampler=causal width=" + std::to_string(kWidth) +
                             " height=" + std::to_string(kHeight) + " " + props +
                             " s.video ! appsink name=v sync=false max-buffers=0"
                             " s.audio ! audio/x-raw,format=F32LE ! appsink name=a sync=false";
    GError* err = nullptr;
    pipeline = gst_parse_launch(desc.c_str(), &err);
    EXPECT_EQ(err, nullptr) << (err ? err->message : "");
    src = h3test::by_name(pipeline, "s");
    video = GST_APP_SINK(h3test::by_name(pipeline, "v"));
    audio = GST_APP_SINK(h3test::by_name(pipeline, "a"));
  }
  ~Pipeline() {
    gst_element_set_state(pipeline, GST_STATE_NULL);
    gst_object_unref(video);
    gst_object_unref(audio);
    gst_object_unref(src);
    gst_object_unref(pipeline);
  }
  // The next `n` frames' bytes.
  std::vector<std::string> pull_frames(int n) {
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) {
      GstSample* s = gst_app_sink_try_pull_sample(video, 120 * GST_SECOND);
      if (!s) break;
      GstMapInfo m;
      GstBuffer* b = gst_sample_get_buffer(s);
      gst_buffer_map(b, &m, GST_MAP_READ);
      out.emplace_back(reinterpret_cast<const char*>(m.data), m.size);
      gst_buffer_unmap(b, &m);
      gst_sample_unref(s);
    }
    return out;
  }
};

// Every h3-prompt-applied message on the bus so far: (chunk, running-time).
std::vector<std::pair<gint64, guint64>> prompts_applied(GstElement* pipeline) {
  std::vector<std::pair<gint64, guint64>> out;
  GstBus* bus = gst_element_get_bus(pipeline);
  while (GstMessage* m = gst_bus_pop_filtered(bus, GST_MESSAGE_ELEMENT)) {
    const GstStructure* s = gst_message_get_structure(m);
    if (s && gst_structure_has_name(s, "h3-prompt-applied")) {
      gint64 chunk = -1;
      guint64 at = 0;
      gst_structure_get_int64(s, "chunk", &chunk);
      gst_structure_get_uint64(s, "running-time", &at);
      out.emplace_back(chunk, at);
    }
    gst_message_unref(m);
  }
  gst_object_unref(bus);
  return out;
}

TEST(H3SrcLive, AnEndlessStreamEndsAtTheApplicationsEosAfterWholeChunksWithTheirSoundtrack) {
  Pipeline p("");  // num-frames -1 with sampler=causal: endless
  ASSERT_EQ(gst_element_set_state(p.pipeline, GST_STATE_PLAYING), GST_STATE_CHANGE_ASYNC);
  EXPECT_EQ(p.pull_frames(3 * 17).size(), 51u);
  gint64 duration = 0;
  EXPECT_FALSE(gst_element_query_duration(p.src, GST_FORMAT_TIME, &duration) && duration >= 0)
      << "an endless stream has no duration";
  gst_element_send_event(p.pipeline, gst_event_new_eos());
  // The rest of the frames up to the EOS: whole chunks.
  int64_t frames = 51;
  while (GstSample* s = gst_app_sink_try_pull_sample(p.video, 120 * GST_SECOND)) {
    ++frames;
    gst_sample_unref(s);
  }
  EXPECT_TRUE(gst_app_sink_is_eos(p.video));
  EXPECT_EQ(frames % 17, 0) << frames << " frames";
  int64_t samples = 0;
  while (GstSample* s = gst_app_sink_try_pull_sample(p.audio, 120 * GST_SECOND)) {
    samples += static_cast<int64_t>(gst_buffer_get_size(gst_sample_get_buffer(s)) / (2 * sizeof(float)));
    gst_sample_unref(s);
  }
  EXPECT_TRUE(gst_app_sink_is_eos(p.audio));
  // The soundtrack of those frames: 800 samples per audio latent, round(frames * 5 / 3) latents.
  EXPECT_EQ(samples, 800 * ((frames * 5 + 1) / 3)) << frames << " frames";
}

TEST(H3SrcLive, APromptEventLandsAtItsChunkAndGivesTheFramesOfTheSameTimelineUpFront) {
  // Chunk 6 starts at 102 / 24 = 4.25 s.
  std::vector<std::string> live, up_front;
  {
    Pipeline p("seed=3");
    ASSERT_EQ(gst_element_set_state(p.pipeline, GST_STATE_PLAYING), GST_STATE_CHANGE_ASYNC);
    ASSERT_EQ(gst_element_get_state(p.pipeline, nullptr, nullptr, 120 * GST_SECOND),
              GST_STATE_CHANGE_SUCCESS);
    GstStructure* s =
        gst_structure_new("h3-prompt", "prompt", G_TYPE_STRING, "a lighthouse in a storm", "running-time",
                          G_TYPE_UINT64, static_cast<guint64>(4.25 * GST_SECOND), nullptr);
    EXPECT_TRUE(gst_element_send_event(p.src, gst_event_new_custom(GST_EVENT_CUSTOM_UPSTREAM, s)));
    live = p.pull_frames(8 * 17);
    const auto applied = prompts_applied(p.pipeline);
    ASSERT_EQ(applied.size(), 1u);
    EXPECT_EQ(applied[0].first, 6);
    EXPECT_EQ(applied[0].second, static_cast<guint64>(102) * GST_SECOND / 24);
  }
  {
    const std::string file = "/tmp/h3-live-timeline-" + std::to_string(::getpid()) + ".txt";
    std::ofstream(file) << "# seconds prompt\n4.25 a lighthouse in a storm\n";
    Pipeline p("seed=3 prompt-timeline=" + file);
    ASSERT_EQ(gst_element_set_state(p.pipeline, GST_STATE_PLAYING), GST_STATE_CHANGE_ASYNC);
    up_front = p.pull_frames(8 * 17);
    std::remove(file.c_str());
  }
  ASSERT_EQ(live.size(), 136u);
  ASSERT_EQ(up_front.size(), 136u);
  for (size_t i = 0; i < live.size(); ++i) EXPECT_TRUE(live[i] == up_front[i]) << "frame " << i;
}

TEST(H3SrcLive, ThePromptPropertySetWhilePlayingTakesOverAtAChunkBoundary) {
  Pipeline p("");
  ASSERT_EQ(gst_element_set_state(p.pipeline, GST_STATE_PLAYING), GST_STATE_CHANGE_ASYNC);
  EXPECT_EQ(p.pull_frames(17).size(), 17u);
  g_object_set(p.src, "prompt", "a red kite over the sea", nullptr);
  gchar* now = nullptr;
  g_object_get(p.src, "prompt", &now, nullptr);
  EXPECT_STREQ(now, "a red kite over the sea");
  g_free(now);
  p.pull_frames(10 * 17);
  const auto applied = prompts_applied(p.pipeline);
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_GE(applied[0].first, 1);
  EXPECT_EQ(applied[0].second, static_cast<guint64>(applied[0].first) * 17 * GST_SECOND / 24);
}

TEST(H3VideoSrcLive, AnEndlessLiveStreamReportsALatencyOfAtLeastTheTimeAChunkTakes) {
  GError* err = nullptr;
  GstElement* pipeline = gst_parse_launch(
      // 64 forwards a chunk at 384x224 (about 1.5 s a chunk on 2 cores, against 0.71 s of video):
      // slower than real time, so that the chunks' pace is their production, not the clock's (a
      // faster source waits for the clock; 48 forwards at 256x160 took 0.58 s here).
      "h3videosrc name=s sampler=causal is-live=true steps=64 width=384 height=224 ! appsink name=v "
      "sync=false",
      &err);
  ASSERT_EQ(err, nullptr);
  GstElement* src = h3test::by_name(pipeline, "s");
  GstAppSink* sink = GST_APP_SINK(h3test::by_name(pipeline, "v"));
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  for (int frame = 0; frame < 8 * 17; ++frame) {
    GstSample* s = gst_app_sink_try_pull_sample(sink, 120 * GST_SECOND);
    ASSERT_NE(s, nullptr) << "frame " << frame;
    gst_sample_unref(s);
  }
  // The time each chunk took to produce, as the engine reports it (h3-progress, decoding).
  std::vector<double> decoded;
  GstBus* bus = gst_element_get_bus(pipeline);
  while (GstMessage* m = gst_bus_pop_filtered(bus, GST_MESSAGE_ELEMENT)) {
    const GstStructure* st = gst_message_get_structure(m);
    double elapsed = 0;
    if (st && gst_structure_has_name(st, "h3-progress") &&
        g_strcmp0(gst_structure_get_string(st, "phase"), "decoding") == 0 &&
        gst_structure_get_double(st, "elapsed", &elapsed)) {
      decoded.push_back(elapsed);
    }
    gst_message_unref(m);
  }
  gst_object_unref(bus);
  ASSERT_GE(decoded.size(), 6u);
  std::vector<double> periods;
  for (size_t i = 2; i < decoded.size(); ++i) periods.push_back(decoded[i] - decoded[i - 1]);
  std::sort(periods.begin(), periods.end());
  const double period = periods[periods.size() / 2];
  GstQuery* q = gst_query_new_latency();
  ASSERT_TRUE(gst_element_query(src, q));
  gboolean live = FALSE;
  GstClockTime min = 0, max = 0;
  gst_query_parse_latency(q, &live, &min, &max);
  gst_query_unref(q);
  std::printf("live latency %.3f s, median time to produce a chunk %.3f s\n",
              static_cast<double>(min) / GST_SECOND, period);
  EXPECT_TRUE(live);
  if (period <= 17.0 / 24.0 * 1.02) {
    // The clock paced the chunks, not their production (their period is a chunk's 17/24 s, give or
    // take the clock's jitter): what this test compares is not there.
    gst_element_set_state(pipeline, GST_STATE_NULL);
    gst_object_unref(src);
    gst_object_unref(sink);
    gst_object_unref(pipeline);
    GTEST_SKIP() << "this machine makes the chunks faster than real time (" << period << " s each)";
  }
  EXPECT_GE(static_cast<double>(min) / GST_SECOND, period) << "the latency must cover the time a chunk takes";
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(src);
  gst_object_unref(sink);
  gst_object_unref(pipeline);
}

TEST(H3SrcLive, IsLiveMakesALiveSourceOnTheRunningClockThatSurvivesAPause) {
  GError* err = nullptr;
  GstElement* pipeline = gst_parse_launch(
      "h3src name=s sampler=causal is-live=true width=80 height=48 s.video ! appsink name=v sync=true "
      "s.audio ! audio/x-raw,format=F32LE ! appsink name=a sync=true",
      &err);
  ASSERT_EQ(err, nullptr);
  GstAppSink* video = GST_APP_SINK(h3test::by_name(pipeline, "v"));
  GstAppSink* audio = GST_APP_SINK(h3test::by_name(pipeline, "a"));
  // A live source does not preroll.
  EXPECT_EQ(gst_element_set_state(pipeline, GST_STATE_PAUSED), GST_STATE_CHANGE_NO_PREROLL);
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  std::vector<GstClockTime> pts;
  for (int i = 0; i < 2 * 17; ++i) {
    GstSample* s = gst_app_sink_try_pull_sample(video, 120 * GST_SECOND);
    ASSERT_NE(s, nullptr) << "frame " << i;
    GstBuffer* b = gst_sample_get_buffer(s);
    EXPECT_TRUE(GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_LIVE));
    pts.push_back(GST_BUFFER_PTS(b));
    gst_sample_unref(s);
  }
  // Running times: frame n at the stream's first buffer's running time plus n / 24 s.
  for (size_t i = 1; i < pts.size(); ++i) {
    EXPECT_EQ(pts[i] - pts[0], gst_util_uint64_scale(i, GST_SECOND, 24)) << "frame " << i;
  }
  GstSample* first_audio = gst_app_sink_try_pull_sample(audio, 120 * GST_SECOND);
  ASSERT_NE(first_audio, nullptr);
  // Both pads share the anchor: the soundtrack starts with the frames (within one frame's time).
  const GstClockTime apts = GST_BUFFER_PTS(gst_sample_get_buffer(first_audio));
  EXPECT_LE(apts > pts[0] ? apts - pts[0] : pts[0] - apts, GST_SECOND / 24);
  gst_sample_unref(first_audio);
  GstQuery* q = gst_query_new_latency();
  ASSERT_TRUE(gst_element_query(pipeline, q));
  gboolean live = FALSE;
  GstClockTime min = 0, max = 0;
  gst_query_parse_latency(q, &live, &min, &max);
  gst_query_unref(q);
  EXPECT_TRUE(live);
  EXPECT_GE(min, GST_SECOND / 24);
  // Paused and playing again: the stream goes on where it was.
  EXPECT_EQ(gst_element_set_state(pipeline, GST_STATE_PAUSED), GST_STATE_CHANGE_NO_PREROLL);
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  GstSample* more = gst_app_sink_try_pull_sample(video, 120 * GST_SECOND);
  ASSERT_NE(more, nullptr);
  EXPECT_GT(GST_BUFFER_PTS(gst_sample_get_buffer(more)), pts.back());
  gst_sample_unref(more);
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(video);
  gst_object_unref(audio);
  gst_object_unref(pipeline);
}

TEST(H3SrcLive, AnEmptyPromptEventIsRefusedAndABadTimelineFailsTheStartNamingTheFile) {
  {
    Pipeline p("");
    ASSERT_EQ(gst_element_set_state(p.pipeline, GST_STATE_PLAYING), GST_STATE_CHANGE_ASYNC);
    EXPECT_EQ(p.pull_frames(17).size(), 17u);
    GstStructure* s = gst_structure_new("h3-prompt", "prompt", G_TYPE_STRING, "", nullptr);
    EXPECT_FALSE(gst_element_send_event(p.src, gst_event_new_custom(GST_EVENT_CUSTOM_UPSTREAM, s)));
  }
  const std::string file = "/tmp/h3-bad-timeline-" + std::to_string(::getpid()) + ".txt";
  std::ofstream(file) << "5 a\n2 b\n";
  Pipeline p("prompt-timeline=" + file);
  gst_element_set_state(p.pipeline, GST_STATE_PLAYING);
  GstBus* bus = gst_element_get_bus(p.pipeline);
  GstMessage* m = gst_bus_timed_pop_filtered(bus, 60 * GST_SECOND, GST_MESSAGE_ERROR);
  ASSERT_NE(m, nullptr);
  GError* err = nullptr;
  gst_message_parse_error(m, &err, nullptr);
  EXPECT_NE(std::string(err->message).find(file + ":2"), std::string::npos) << err->message;
  g_error_free(err);
  gst_message_unref(m);
  gst_object_unref(bus);
  std::remove(file.c_str());
}

}  // namespace
