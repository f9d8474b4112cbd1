// A live source's times on the pipeline's clock (docs/element.md, "Latency" and "h3-prompt-applied"),
// made deterministic with a GstTestClock that moves only when the test moves it: a stream whose
// chunks come after they were due posts one QoS message per late chunk and one warning (an endless
// stream's without num-frames); a QoS event from downstream drops no frame; a prompt change is
// reported with the running time its chunk's first buffer went out with, and an h3-prompt event's
// running time is read on the same clock, when the stream's first frame is not at running time 0.
#include <gst/app/gstappsink.h>
#include <gst/check/gsttestclock.h>
#include <gst/gst.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gst_test_util.h"

namespace {

GstClockTime frame_time(guint64 n) {
  return gst_util_uint64_scale(n, GST_SECOND, 24);
}

// A live pipeline of `launch` (its source named s, its video appsink v) on a test clock that
// reads `clock_at` and does not move until the test moves it. A GstTestClock releases a wait only
// when told to: a thread of the test releases each wait whose time the clock has reached, so a
// wait ends as on a real clock, at the time the test set.
struct LivePipeline {
  GstElement* pipeline = nullptr;
  GstElement* src = nullptr;
  GstAppSink* video = nullptr;
  GstClock* clock = nullptr;
  std::atomic<bool> stop{false};
  std::thread releaser;
  LivePipeline(const std::string& launch, GstClockTime clock_at) {
    GError* err = nullptr;
    pipeline = gst_parse_launch(launch.c_str(), &err);
    EXPECT_EQ(err, nullptr) << (err ? err->message : "");
    src = h3test::by_name(pipeline, "s");
    video = GST_APP_SINK(h3test::by_name(pipeline, "v"));
    clock = gst_test_clock_new_with_start_time(clock_at);
    gst_pipeline_use_clock(GST_PIPELINE(pipeline), clock);
    releaser = std::thread([this] {
      while (!stop) {
        // The next pending wait, if the clock has reached its time.
        if (GstClockID id = gst_test_clock_process_next_clock_id(GST_TEST_CLOCK(clock))) {
          gst_clock_id_unref(id);
        } else {
          g_usleep(1000);
        }
      }
    });
  }
  ~LivePipeline() {
    gst_element_set_state(pipeline, GST_STATE_NULL);
    stop = true;
    releaser.join();
    gst_object_unref(clock);
    gst_object_unref(video);
    gst_object_unref(src);
    gst_object_unref(pipeline);
  }
  void move_clock_to(GstClockTime t) { gst_test_clock_set_time(GST_TEST_CLOCK(clock), t); }
  // The next frame's PTS and OFFSET (GST_CLOCK_TIME_NONE, -1 at the end).
  std::pair<GstClockTime, gint64> pull() {
    GstSample* s = gst_app_sink_try_pull_sample(video, 120 * GST_SECOND);
    if (!s) return {GST_CLOCK_TIME_NONE, -1};
    GstBuffer* b = gst_sample_get_buffer(s);
    const std::pair<GstClockTime, gint64> out{GST_BUFFER_PTS(b), static_cast<gint64>(GST_BUFFER_OFFSET(b))};
    gst_sample_unref(s);
    return out;
  }
  // Every message on the bus so far (the bus's filtered pop would throw the others away).
  std::vector<GstMessage*> messages() {
    std::vector<GstMessage*> out;
    GstBus* bus = gst_element_get_bus(pipeline);
    while (GstMessage* m = gst_bus_pop(bus)) out.push_back(m);
    gst_object_unref(bus);
    return out;
  }
};

std::vector<GstMessage*> of_type(const std::vector<GstMessage*>& ms, GstMessageType type) {
  std::vector<GstMessage*> out;
  for (GstMessage* m : ms) {
    if (GST_MESSAGE_TYPE(m) == type) out.push_back(m);
  }
  return out;
}

void unref_all(std::vector<GstMessage*>& ms) {
  for (GstMessage* m : ms) gst_message_unref(m);
  ms.clear();
}

// The slower-than-real-time warnings (STREAM / FAILED) among `ms`, each for frame 17 (chunk 1's
// first, the first chunk after the stream's anchor), its lateness in its details and its text
// ending with what to change, `advice`: how many there are; *lateness: the last one's.
int late_warnings(const std::vector<GstMessage*>& ms, const char* advice, guint64* lateness) {
  int n = 0;
  for (GstMessage* m : of_type(ms, GST_MESSAGE_WARNING)) {
    GError* err = nullptr;
    gst_message_parse_warning(m, &err, nullptr);
    if (err->domain == GST_STREAM_ERROR) {
      ++n;
      EXPECT_EQ(err->code, GST_STREAM_ERROR_FAILED);
      const GstStructure* details = nullptr;
      gst_message_parse_warning_details(m, &details);
      gint64 frame = -1;
      EXPECT_TRUE(details && gst_structure_get_int64(details, "frame", &frame));
      EXPECT_TRUE(details && gst_structure_get_uint64(details, "lateness", lateness));
      EXPECT_EQ(frame, 17);
      gchar* want = g_strdup_printf("Generation is slower than real time: frame 17 came %" G_GUINT64_FORMAT
                                    " ms after it was due. Frames are sent late, none is dropped; %s",
                                    *lateness / GST_MSECOND, advice);
      EXPECT_STREQ(err->message, want);
      g_free(want);
    }
    g_error_free(err);
  }
  return n;
}

GstClockTime latency_of(GstElement* src) {
  GstQuery* q = gst_query_new_latency();
  EXPECT_TRUE(gst_element_query(src, q));
  gboolean live = FALSE;
  GstClockTime min = 0, max = 0;
  gst_query_parse_latency(q, &live, &min, &max);
  gst_query_unref(q);
  EXPECT_TRUE(live);
  return min;
}

TEST(H3VideoSrcLiveTiming, ALateStreamPostsAQosMessagePerLateChunkAndOneWarningSayingWhatToChange) {
  LivePipeline p(
      "h3videosrc name=s sampler=causal is-live=true width=80 height=48 num-frames=51 ! appsink name=v "
      "sync=false",
      0);
  gst_element_set_state(p.pipeline, GST_STATE_PLAYING);
  // Frame 0 goes out at running time 0; frame 1 waits for 1/24 s on the test clock.
  ASSERT_EQ(p.pull(), std::make_pair(GstClockTime(0), gint64(0)));
  // 100 s later: chunks 1 and 2 (frames 17 and 34) come long after they were due, on any machine
  // whose chunks take less than a minute and a half.
  const GstClockTime now = 100 * GST_SECOND;
  p.move_clock_to(now);
  for (gint64 n = 1; n < 51; ++n) ASSERT_EQ(p.pull().second, n);
  EXPECT_EQ(p.pull().second, -1);
  EXPECT_TRUE(gst_app_sink_is_eos(p.video));
  const GstClockTime latency = latency_of(p.src);  // the largest it was: a chunk's time only grows

  auto all = p.messages();
  auto qos = of_type(all, GST_MESSAGE_QOS);
  ASSERT_EQ(qos.size(), 2u) << "one QoS message per late chunk (chunk 0 is the stream's anchor)";
  guint64 first_jitter = 0;
  for (size_t i = 0; i < qos.size(); ++i) {
    const guint64 frame = 17 * (i + 1);
    gboolean live = FALSE;
    guint64 running_time = 0, stream_time = 0, timestamp = 0, duration = 0;
    gst_message_parse_qos(qos[i], &live, &running_time, &stream_time, &timestamp, &duration);
    EXPECT_TRUE(live);
    EXPECT_EQ(running_time, frame_time(frame)) << "the late frame's running time";
    EXPECT_EQ(stream_time, frame_time(frame));
    EXPECT_EQ(timestamp, frame_time(frame));
    EXPECT_EQ(duration, frame_time(frame + 1) - frame_time(frame));
    gint64 jitter = 0;
    gdouble proportion = 0;
    gint quality = 0;
    gst_message_parse_qos_values(qos[i], &jitter, &proportion, &quality);
    // Due at its running time plus the latency the element reported then (at least a frame, at
    // most what it reports now); it went out at `now`.
    EXPECT_LE(jitter, static_cast<gint64>(now - frame_time(frame) - frame_time(1))) << "frame " << frame;
    EXPECT_GE(jitter, static_cast<gint64>(now - frame_time(frame) - latency)) << "frame " << frame;
    EXPECT_EQ(proportion, 1.0);
    EXPECT_EQ(quality, 1000000);
    GstFormat format = GST_FORMAT_UNDEFINED;
    guint64 processed = 0, dropped = 1;
    gst_message_parse_qos_stats(qos[i], &format, &processed, &dropped);
    EXPECT_EQ(format, GST_FORMAT_BUFFERS);
    EXPECT_EQ(processed, frame);
    EXPECT_EQ(dropped, 0u) << "late frames are sent, never dropped";
    if (i == 0) first_jitter = static_cast<guint64>(jitter);
  }

  // One warning per stream (beside the sampler's: causal without a LoRA), with the first late
  // frame and its lateness, saying what to change.
  guint64 lateness = 0;
  EXPECT_EQ(late_warnings(all, "lower num-frames, width/height or steps, add ranks, or use is-live=false",
                          &lateness),
            1);
  EXPECT_EQ(lateness, first_jitter);
  unref_all(all);
}

// pace=steps (docs/element.md, "Keeping pace"): a live endless stream that falls behind lowers its
// forwards per chunk, 4 -> 3 -> 2, each change posted as h3-pace once the engine took it, and goes
// no lower. The test clock jumps 100 s ahead after frame 0, so every later chunk is some 90 s late
// on any machine that makes a chunk in less than a second.
TEST(H3VideoSrcLiveTiming, ALiveStreamThatFallsBehindPostsH3PaceWithFewerStepsDownToTwo) {
  LivePipeline p(
      "h3videosrc name=s sampler=causal is-live=true pace=steps width=80 height=48 num-frames=-1 ! "
      "appsink name=v sync=false",
      0);
  gst_element_set_state(p.pipeline, GST_STATE_PLAYING);
  ASSERT_EQ(p.pull(), std::make_pair(GstClockTime(0), gint64(0)));
  p.move_clock_to(100 * GST_SECOND);
  struct Pace {
    gint64 chunk;
    gint steps, previous;
    gint64 lateness;
    std::string reason;
  };
  std::vector<Pace> paces;
  // Two changes take a few chunks each (two late chunks, then the engine's next boundary); 40
  // chunks are far more than that, and the floor keeps a third from coming.
  for (gint64 n = 1; n < 40 * 17; ++n) {
    ASSERT_EQ(p.pull().second, n);
    if (n % 17 != 0) continue;
    auto all = p.messages();
    for (GstMessage* m : of_type(all, GST_MESSAGE_ELEMENT)) {
      const GstStructure* s = gst_message_get_structure(m);
      if (!gst_structure_has_name(s, "h3-pace")) continue;
      Pace x{};
      EXPECT_TRUE(gst_structure_get_int64(s, "chunk", &x.chunk));
      EXPECT_TRUE(gst_structure_get_int(s, "steps", &x.steps));
      EXPECT_TRUE(gst_structure_get_int(s, "previous-steps", &x.previous));
      EXPECT_TRUE(gst_structure_get_int64(s, "lateness", &x.lateness));
      const gchar* reason = gst_structure_get_string(s, "reason");
      x.reason = reason ? reason : "";
      paces.push_back(x);
    }
    unref_all(all);
    if (paces.size() >= 2 && n >= 30 * 17) break;
  }
  ASSERT_EQ(paces.size(), 2u) << "4 -> 3 -> 2, and no lower";
  EXPECT_EQ(paces[0].previous, 4);
  EXPECT_EQ(paces[0].steps, 3);
  EXPECT_EQ(paces[1].previous, 3);
  EXPECT_EQ(paces[1].steps, 2);
  // Decided after two late chunks (1 and 2) at the earliest, taken from a later chunk; the second
  // after two late chunks made with 3 forwards.
  EXPECT_GE(paces[0].chunk, 3);
  EXPECT_GE(paces[1].chunk, paces[0].chunk + 2);
  for (const Pace& x : paces) {
    EXPECT_EQ(x.reason, "late");
    EXPECT_GT(x.lateness, 250 * static_cast<gint64>(GST_MSECOND)) << "over the policy's threshold";
  }
}

// An endless stream (sampler=causal, num-frames -1) has no num-frames to lower: its warning says
// what would make its chunks faster. h3src's pads pace their buffers themselves (SrcPad).
TEST(H3SrcLiveTiming, AnEndlessLateStreamsWarningDoesNotAskForFewerFrames) {
  LivePipeline p(
      "h3src name=s sampler=causal is-live=true width=80 height=48 s.video ! appsink name=v sync=false "
      "s.audio ! fakesink sync=false async=false",
      0);
  gst_element_set_state(p.pipeline, GST_STATE_PLAYING);
  ASSERT_EQ(p.pull(), std::make_pair(GstClockTime(0), gint64(0)));
  p.move_clock_to(100 * GST_SECOND);  // chunk 1 (frame 17) comes long after it was due
  for (gint64 n = 1; n < 35; ++n) ASSERT_EQ(p.pull().second, n);

  auto all = p.messages();
  guint64 lateness = 0;
  EXPECT_EQ(late_warnings(all, "lower width/height or steps, add ranks, or use is-live=false", &lateness), 1);
  unref_all(all);
}

TEST(H3VideoSrcLiveTiming, AQosEventFromDownstreamIsTakenAndDropsNoFrame) {
  // No clock: the source is never held by it, so only a QoS reaction could thin the stream.
  GError* err = nullptr;
  GstElement* pipeline = gst_parse_launch(
      "h3videosrc name=s sampler=causal is-live=true width=80 height=48 num-frames=51 ! appsink name=v "
      "sync=false",
      &err);
  ASSERT_EQ(err, nullptr);
  gst_pipeline_use_clock(GST_PIPELINE(pipeline), nullptr);
  GstElement* src = h3test::by_name(pipeline, "s");
  GstAppSink* sink = GST_APP_SINK(h3test::by_name(pipeline, "v"));
  GstPad* pad = gst_element_get_static_pad(src, "src");
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  std::vector<GstClockTime> pts;
  for (gint64 n = 0; n < 51; ++n) {
    GstSample* s = gst_app_sink_try_pull_sample(sink, 120 * GST_SECOND);
    ASSERT_NE(s, nullptr) << "frame " << n;
    GstBuffer* b = gst_sample_get_buffer(s);
    EXPECT_EQ(static_cast<gint64>(GST_BUFFER_OFFSET(b)), n);
    pts.push_back(GST_BUFFER_PTS(b));
    gst_sample_unref(s);
    if (n == 2) {
      // A sink that got frame 2 ten seconds late, as basesink reports it: a decoder would now drop
      // what cannot be on time (the next 20 s); a generated frame costs its chunk whether it is
      // pushed or not, and the next chunk is made from it.
      EXPECT_TRUE(gst_pad_send_event(
          pad, gst_event_new_qos(GST_QOS_TYPE_OVERFLOW, 2.0, 10 * GST_SECOND, pts.back())));
      EXPECT_TRUE(
          gst_pad_send_event(pad, gst_event_new_qos(GST_QOS_TYPE_THROTTLE, 2.0, GST_SECOND, pts.back())));
    }
  }
  GstSample* end = gst_app_sink_try_pull_sample(sink, 120 * GST_SECOND);
  EXPECT_EQ(end, nullptr);
  EXPECT_TRUE(gst_app_sink_is_eos(sink));
  // Every frame, each at its own time: nothing was dropped or re-timed.
  for (size_t n = 1; n < pts.size(); ++n) EXPECT_EQ(pts[n] - pts[0], frame_time(n)) << "frame " << n;
  GstBus* bus = gst_element_get_bus(pipeline);
  GstMessage* qos = gst_bus_pop_filtered(bus, GST_MESSAGE_QOS);
  EXPECT_EQ(qos, nullptr) << "the element dropped nothing, so it reports no QoS decision";
  if (qos) gst_message_unref(qos);
  gst_object_unref(bus);
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(pad);
  gst_object_unref(sink);
  gst_object_unref(src);
  gst_object_unref(pipeline);
}

// The pipeline's running time starts at 7 s (its start time; the test clock reads 100 s and holds),
// so the stream's first frame goes out at running time 7 s, not 0: an h3-prompt event naming the
// running time of chunk 6's start (7 s + 102/24 s) lands on chunk 6, and h3-prompt-applied carries
// the running time chunk 6's first buffer went out with.
void prompt_on_the_running_clock(const std::string& launch) {
  LivePipeline p(launch, 100 * GST_SECOND);
  ASSERT_EQ(gst_element_set_state(p.pipeline, GST_STATE_PAUSED), GST_STATE_CHANGE_NO_PREROLL);
  const GstClockTime start = 7 * GST_SECOND;
  gst_element_set_start_time(p.pipeline, start);
  gst_element_set_state(p.pipeline, GST_STATE_PLAYING);
  ASSERT_EQ(p.pull(), std::make_pair(start, gint64(0)));
  // The clock holds frame 1, so the engine is held back by the full queue (queue-chunks 2: chunks
  // 1 and 2) and the decode of chunk 3, which may have begun chunk 4's latents: chunk 6 has not
  // begun, however far the engine ran before this event (a change for chunk 3 landed on chunk 4
  // in 1 of 10 runs under load).
  GstStructure* s = gst_structure_new("h3-prompt", "prompt", G_TYPE_STRING, "a lighthouse in a storm",
                                      "running-time", G_TYPE_UINT64, start + frame_time(102), nullptr);
  EXPECT_TRUE(gst_element_send_event(p.src, gst_event_new_custom(GST_EVENT_CUSTOM_UPSTREAM, s)));
  p.move_clock_to(1000 * GST_SECOND);
  GstClockTime chunk6 = GST_CLOCK_TIME_NONE;
  for (gint64 n = 1; n < 119; ++n) {
    const auto [pts, offset] = p.pull();
    ASSERT_EQ(offset, n);
    EXPECT_EQ(pts, start + frame_time(n)) << "frame " << n;
    if (n == 102) chunk6 = pts;
  }
  auto all = p.messages();
  std::vector<std::pair<gint64, guint64>> applied;
  for (GstMessage* m : of_type(all, GST_MESSAGE_ELEMENT)) {
    const GstStructure* st = gst_message_get_structure(m);
    if (!gst_structure_has_name(st, "h3-prompt-applied")) continue;
    gint64 chunk = -1;
    guint64 at = 0;
    EXPECT_TRUE(gst_structure_get_int64(st, "chunk", &chunk));
    EXPECT_TRUE(gst_structure_get_uint64(st, "running-time", &at));
    applied.emplace_back(chunk, at);
  }
  unref_all(all);
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(applied[0].first, 6);
  EXPECT_EQ(applied[0].second, chunk6) << "the running time of chunk 6's first buffer";
  EXPECT_EQ(applied[0].second, start + frame_time(102));
}

TEST(H3VideoSrcLiveTiming, APromptChangeIsReportedWithTheRunningTimeOfItsChunksFirstBuffer) {
  prompt_on_the_running_clock(
      "h3videosrc name=s sampler=causal is-live=true width=80 height=48 num-frames=119 ! appsink name=v "
      "sync=false");
}

TEST(H3SrcLiveTiming, APromptChangeIsReportedWithTheRunningTimeOfItsChunksFirstBuffer) {
  prompt_on_the_running_clock(
      "h3src name=s sampler=causal is-live=true width=80 height=48 num-frames=119 s.video ! appsink name=v "
      "sync=false s.audio ! fakesink sync=false async=false");
}

}  // namespace
