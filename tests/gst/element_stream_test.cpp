// h3videosrc on the real engine and the tiny default model: caps, timestamps,
// EOS, queries, tags and messages, determinism, and streaming itself.
#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <gst/video/video.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "clip_params.h"
#include "gst_test_util.h"

namespace {

using h3test::kFrames;
using h3test::kHeight;
using h3test::kWidth;

std::string launch(const std::string& extra = "") {
  return "h3videosrc num-frames=" + std::to_string(kFrames) + " width=" + std::to_string(kWidth) +
         " height=" + std::to_string(kHeight) + " " + extra;
}

GstClockTime at(int64_t n) {
  return gst_util_uint64_scale(n, GST_SECOND, 24);
}

TEST(H3VideoSrcStream, CapsAreFixatedToTheRequestedSizeAndTheModelsRate) {
  GstHarness* h = gst_harness_new_parse(launch().c_str());
  gst_harness_play(h);
  GstBuffer* b = gst_harness_pull(h);
  ASSERT_NE(b, nullptr);
  GstCaps* caps = gst_pad_get_current_caps(h->sinkpad);
  ASSERT_NE(caps, nullptr);
  const GstStructure* s = gst_caps_get_structure(caps, 0);
  EXPECT_STREQ(gst_structure_get_string(s, "format"), "RGB");
  EXPECT_STREQ(gst_structure_get_string(s, "interlace-mode"), "progressive");
  EXPECT_STREQ(gst_structure_get_string(s, "colorimetry"), "sRGB");
  gint w = 0, hh = 0, fn = 0, fd = 0, pn = 0, pd = 0;
  EXPECT_TRUE(gst_structure_get_int(s, "width", &w));
  EXPECT_TRUE(gst_structure_get_int(s, "height", &hh));
  EXPECT_TRUE(gst_structure_get_fraction(s, "framerate", &fn, &fd));
  EXPECT_TRUE(gst_structure_get_fraction(s, "pixel-aspect-ratio", &pn, &pd));
  EXPECT_EQ(w, kWidth);
  EXPECT_EQ(hh, kHeight);
  EXPECT_EQ(fn, 24);
  EXPECT_EQ(fd, 1);
  EXPECT_EQ(pn, 1);
  EXPECT_EQ(pd, 1);
  GstVideoInfo info;
  ASSERT_TRUE(gst_video_info_from_caps(&info, caps));
  EXPECT_EQ(gst_buffer_get_size(b), GST_VIDEO_INFO_SIZE(&info));
  gst_caps_unref(caps);
  gst_buffer_unref(b);
  gst_harness_teardown(h);
}

TEST(H3VideoSrcStream, DownstreamMayAskForI420AndGetsBt709) {
  GstHarness* h = gst_harness_new_parse(launch().c_str());
  gst_harness_set_sink_caps_str(h, "video/x-raw,format=I420");
  gst_harness_play(h);
  GstBuffer* b = gst_harness_pull(h);
  ASSERT_NE(b, nullptr);
  GstCaps* caps = gst_pad_get_current_caps(h->sinkpad);
  GstVideoInfo info;
  ASSERT_TRUE(gst_video_info_from_caps(&info, caps));
  EXPECT_EQ(GST_VIDEO_INFO_FORMAT(&info), GST_VIDEO_FORMAT_I420);
  EXPECT_EQ(GST_VIDEO_INFO_COLORIMETRY(&info).matrix, GST_VIDEO_COLOR_MATRIX_BT709);
  EXPECT_EQ(gst_buffer_get_size(b), GST_VIDEO_INFO_SIZE(&info));
  gst_caps_unref(caps);
  gst_buffer_unref(b);
  gst_harness_teardown(h);
}

TEST(H3VideoSrcStream, TimestampsAndOffsetsCoverTheWholeClipThenEos) {
  GstHarness* h = gst_harness_new_parse(launch().c_str());
  gst_harness_play(h);
  for (int64_t i = 0; i < kFrames; ++i) {
    GstBuffer* b = gst_harness_pull(h);
    ASSERT_NE(b, nullptr) << "frame " << i;
    EXPECT_EQ(GST_BUFFER_PTS(b), at(i)) << i;
    EXPECT_FALSE(GST_BUFFER_DTS_IS_VALID(b));
    EXPECT_EQ(GST_BUFFER_DURATION(b), at(i + 1) - at(i)) << i;
    EXPECT_EQ(GST_BUFFER_OFFSET(b), static_cast<guint64>(i));
    EXPECT_EQ(GST_BUFFER_OFFSET_END(b), static_cast<guint64>(i + 1));
    EXPECT_EQ(GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_DISCONT), i == 0) << i;
    gst_buffer_unref(b);
  }
  // Drain the events: the last one is EOS, and no buffer follows the clip.
  GstEvent* last = nullptr;
  for (int i = 0; i < 600; ++i) {
    while (GstEvent* e = gst_harness_try_pull_event(h)) {
      if (last) gst_event_unref(last);
      last = e;
    }
    if (last && GST_EVENT_TYPE(last) == GST_EVENT_EOS) break;
    g_usleep(10000);
  }
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(GST_EVENT_TYPE(last), GST_EVENT_EOS);
  gst_event_unref(last);
  EXPECT_EQ(gst_harness_buffers_received(h), static_cast<guint>(kFrames));
  gst_harness_teardown(h);
}

TEST(H3VideoSrcStream, NumBuffersCountsFrames) {
  GstElement* p = gst_parse_launch((launch("num-buffers=5") + " ! fakesink name=sink").c_str(), nullptr);
  ASSERT_NE(p, nullptr);
  GstElement* sink = h3test::by_name(p, "sink");
  GstBus* bus = gst_element_get_bus(p);
  gst_element_set_state(p, GST_STATE_PLAYING);
  h3test::RunResult r = h3test::wait_for_end(bus, 300);
  gst_object_unref(bus);
  EXPECT_TRUE(r.eos) << r.message;
  GstBuffer* last = nullptr;
  GstSample* sample = nullptr;
  g_object_get(sink, "last-sample", &sample, nullptr);  // before NULL clears it
  gst_element_set_state(p, GST_STATE_NULL);
  ASSERT_NE(sample, nullptr);
  last = gst_sample_get_buffer(sample);
  EXPECT_EQ(GST_BUFFER_OFFSET(last), 4u);
  gst_sample_unref(sample);
  gst_object_unref(sink);
  gst_object_unref(p);
}

TEST(H3VideoSrcStream, DurationIsAnsweredFromNumFramesAndNumBuffers) {
  GstHarness* h = gst_harness_new_parse(launch().c_str());
  gst_harness_play(h);
  GstBuffer* b = gst_harness_pull(h);
  ASSERT_NE(b, nullptr);
  gst_buffer_unref(b);
  gint64 d = -1;
  ASSERT_TRUE(gst_pad_peer_query_duration(h->sinkpad, GST_FORMAT_TIME, &d));
  EXPECT_EQ(d, static_cast<gint64>(at(kFrames)));
  ASSERT_TRUE(gst_pad_peer_query_duration(h->sinkpad, GST_FORMAT_DEFAULT, &d));
  EXPECT_EQ(d, kFrames);
  GstQuery* q = gst_query_new_seeking(GST_FORMAT_TIME);
  ASSERT_TRUE(gst_pad_peer_query(h->sinkpad, q));
  gboolean seekable = TRUE;
  gst_query_parse_seeking(q, nullptr, &seekable, nullptr, nullptr);
  EXPECT_FALSE(seekable);
  gst_query_unref(q);
  gst_harness_teardown(h);

  // Before any start, num-frames and num-buffers are enough.
  GstElement* src = gst_parse_launch("h3videosrc num-frames=40 num-buffers=10", nullptr);
  ASSERT_NE(src, nullptr);
  GstPad* pad = gst_element_get_static_pad(src, "src");
  GstQuery* dq = gst_query_new_duration(GST_FORMAT_TIME);
  ASSERT_TRUE(gst_pad_query(pad, dq));
  gst_query_parse_duration(dq, nullptr, &d);
  EXPECT_EQ(d, static_cast<gint64>(at(10)));
  gst_query_unref(dq);
  gst_object_unref(pad);
  gst_object_unref(src);
}

// The latency query: live only; when live, the slowest chunk's decode time plus 5 % (a chunk's
// frames exist only once the whole chunk is decoded), or one frame when that is more. At 1000 fps
// the one-frame floor is 1 ms, far below any chunk's decode of 256x160 frames, so a latency above
// it is the measured chunk time; and no chunk's decode can take longer than the whole decode, from
// the end of denoising to the end of the request, as the engine's own clock gives them in its
// reports (no wall clock of this test is compared).
TEST(H3VideoSrcStream, LatencyIsLiveOnlyWhenLiveAndCoversTheMeasuredChunkTime) {
  for (const bool live : {true, false}) {
    SCOPED_TRACE(live);
    const std::string l = "h3videosrc name=src num-frames=" + std::to_string(kFrames) +
                          " width=256 height=160 framerate=1000/1 queue-chunks=16" +
                          (live ? " is-live=true" : "") + " ! fakesink sync=false";
    GstElement* p = gst_parse_launch(l.c_str(), nullptr);
    ASSERT_NE(p, nullptr);
    GstElement* src = h3test::by_name(p, "src");
    {
      h3test::BusRecorder rec(p);
      gst_element_set_state(p, GST_STATE_PLAYING);
      // The whole clip, and the report of its last chunk (EOS may overtake it): every chunk
      // time has been measured by then.
      ASSERT_TRUE(rec.wait(
          [](const h3test::BusRecorder& r) {
            if (r.error()) return true;
            for (const auto& pr : r.progress()) {
              if (pr.phase == "decoding" && pr.chunk == pr.total_chunks) return true;
            }
            return false;
          },
          300));
      ASSERT_TRUE(rec.wait_for_end(300));
      EXPECT_TRUE(rec.eos()) << rec.error_message();
      GstQuery* q = gst_query_new_latency();
      GstPad* pad = gst_element_get_static_pad(src, "src");
      ASSERT_TRUE(gst_pad_query(pad, q));
      gboolean is_live = !live;
      GstClockTime min = 0, max = 0;
      gst_query_parse_latency(q, &is_live, &min, &max);
      EXPECT_EQ(static_cast<bool>(is_live), live);
      if (live) {
        std::vector<h3test::BusRecorder::Progress> seen;  // copied under the recorder's lock
        rec.wait(
            [&](const h3test::BusRecorder& r) {
              seen = r.progress();
              return true;
            },
            0);
        // The latency is the slowest chunk's decode time (plus 5 %) or one frame, whichever is
        // more. Every chunk's decode lies between the end of denoising and the end of the
        // request, as the engine's own clock says in its reports: a bound no load can break.
        double denoised_s = -1, done_s = -1;
        for (const auto& pr : seen) {
          if (pr.phase == "denoising") denoised_s = pr.elapsed_s;
          if (pr.phase == "done") done_s = pr.elapsed_s;
        }
        ASSERT_GE(denoised_s, 0.0);
        ASSERT_GE(done_s, denoised_s);
        const GstClockTime frame = gst_util_uint64_scale(1, GST_SECOND, 1000);
        const auto decode_span = static_cast<GstClockTime>((done_s - denoised_s) * GST_SECOND);
        std::printf("latency min %.1f ms; the decode took %.1f ms in all\n", min / 1e6, decode_span / 1e6);
        EXPECT_GT(min, frame);  // the measured chunk time, not the floor
        EXPECT_LE(min, decode_span + decode_span / 20 + GST_MSECOND);
        EXPECT_TRUE(!GST_CLOCK_TIME_IS_VALID(max) || max >= min);
      }
      gst_query_unref(q);
      gst_object_unref(pad);
      gst_element_set_state(p, GST_STATE_NULL);
    }
    gst_object_unref(src);
    gst_object_unref(p);
  }
}

TEST(H3VideoSrcStream, SendsGlobalTagsThatMarkTheStreamAsGeneratedAndAnswersTheRecordQuery) {
  GstHarness* h = gst_harness_new_parse(launch("prompt=\"a red kite\" seed=1234").c_str());
  gst_harness_play(h);
  GstBuffer* b = gst_harness_pull(h);
  ASSERT_NE(b, nullptr);
  gst_buffer_unref(b);
  GstTagList* tags = nullptr;
  while (GstEvent* e = gst_harness_try_pull_event(h)) {
    if (GST_EVENT_TYPE(e) == GST_EVENT_TAG && !tags) {
      GstTagList* t = nullptr;
      gst_event_parse_tag(e, &t);
      tags = gst_tag_list_copy(t);
    }
    gst_event_unref(e);
  }
  ASSERT_NE(tags, nullptr);
  EXPECT_EQ(gst_tag_list_get_scope(tags), GST_TAG_SCOPE_GLOBAL);
  gchar* s = nullptr;
  ASSERT_TRUE(gst_tag_list_get_string(tags, GST_TAG_TITLE, &s));
  EXPECT_STREQ(s, "a red kite");
  g_free(s);
  ASSERT_TRUE(gst_tag_list_get_string(tags, GST_TAG_COMMENT, &s));
  EXPECT_STREQ(s, "a red kite");
  g_free(s);
  ASSERT_TRUE(gst_tag_list_get_string(tags, GST_TAG_ENCODER, &s));
  EXPECT_STREQ(s, "gst-h3");
  g_free(s);
  guint64 seed = 0;
  ASSERT_TRUE(gst_tag_list_get_uint64(tags, "h3-seed", &seed));
  EXPECT_EQ(seed, 1234u);
  // The marking (docs/element.md, "Marking").
  const auto tag = [&](const char* name) {
    gchar* v = nullptr;
    std::string out = gst_tag_list_get_string(tags, name, &v) ? v : "(missing)";
    g_free(v);
    return out;
  };
  EXPECT_EQ(tag("h3-digital-source-type"),
            "http://cv.iptc.org/newscodes/digitalsourcetype/trainedAlgorithmicMedia");
  EXPECT_EQ(tag("h3-sampler"), "euler");
  EXPECT_EQ(tag("h3-model-sha256").size(), 64u);
  EXPECT_EQ(tag(GST_TAG_APPLICATION_NAME).rfind("gst-h3 ", 0), 0u);
  EXPECT_NE(tag(GST_TAG_APPLICATION_NAME).find(" h3videosrc"), std::string::npos);
  const std::string record = tag("h3-record");
  EXPECT_NE(record.find("\"element\":\"h3videosrc\""), std::string::npos) << record;
  EXPECT_NE(record.find("\"seed\":1234"), std::string::npos) << record;
  EXPECT_NE(record.find("\"sha256\":\"" + tag("h3-model-sha256") + "\""), std::string::npos) << record;
  // h3mark's query: answered with the same record.
  GstQuery* q = gst_query_new_custom(GST_QUERY_CUSTOM, gst_structure_new_empty("h3-record"));
  ASSERT_TRUE(gst_pad_peer_query(h->sinkpad, q));
  const gchar* answered = gst_structure_get_string(gst_query_get_structure(q), "record");
  EXPECT_EQ(std::string(answered ? answered : ""), record);
  gst_query_unref(q);
  gst_tag_list_unref(tags);
  gst_harness_teardown(h);
}

TEST(H3VideoSrcStream, PostsOpenProgressAndH3ProgressForEveryStepAndChunk) {
  GstElement* p = gst_parse_launch((launch() + " ! fakesink").c_str(), nullptr);
  ASSERT_NE(p, nullptr);
  GstBus* bus = gst_element_get_bus(p);
  gst_element_set_state(p, GST_STATE_PLAYING);
  std::vector<GstMessage*> msgs;
  const h3test::RunResult r = h3test::wait_for_end(bus, 300, &msgs);
  // EOS may overtake the engine's last messages (the last chunk's and "done"):
  // keep reading until "done".
  auto is_done = [](GstMessage* m) {
    const GstStructure* s = gst_message_get_structure(m);
    return GST_MESSAGE_TYPE(m) == GST_MESSAGE_ELEMENT && gst_structure_has_name(s, "h3-progress") &&
           g_strcmp0(gst_structure_get_string(s, "phase"), "done") == 0;
  };
  bool seen_done = std::any_of(msgs.begin(), msgs.end(), is_done);
  while (!seen_done) {
    GstMessage* m = gst_bus_timed_pop(bus, 60 * GST_SECOND);
    if (!m) break;
    msgs.push_back(m);
    seen_done = is_done(m);
  }
  gst_element_set_state(p, GST_STATE_NULL);
  EXPECT_TRUE(r.eos) << r.message;
  bool start = false, complete = false, done = false;
  int64_t max_step = 0, total_steps = -1, max_chunk = 0, total_chunks = -1, frames = 0;
  for (GstMessage* m : msgs) {
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_PROGRESS) {
      GstProgressType type;
      gchar *code = nullptr, *text = nullptr;
      gst_message_parse_progress(m, &type, &code, &text);
      EXPECT_STREQ(code, "open");
      start = start || type == GST_PROGRESS_TYPE_START;
      complete = complete || type == GST_PROGRESS_TYPE_COMPLETE;
      g_free(code);
      g_free(text);
    } else if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ELEMENT &&
               gst_structure_has_name(gst_message_get_structure(m), "h3-progress")) {
      const GstStructure* s = gst_message_get_structure(m);
      const std::string phase = gst_structure_get_string(s, "phase");
      gint v = 0;
      if (phase == "denoising") {
        gst_structure_get_int(s, "step", &v);
        max_step = std::max<int64_t>(max_step, v);
        gst_structure_get_int(s, "total-steps", &v);
        total_steps = v;
      } else if (phase == "decoding") {
        gst_structure_get_int(s, "chunk", &v);
        max_chunk = std::max<int64_t>(max_chunk, v);
        gst_structure_get_int(s, "total-chunks", &v);
        total_chunks = v;
        gst_structure_get_int(s, "frames", &v);
        frames = std::max<int64_t>(frames, v);
      } else if (phase == "done") {
        done = true;
      }
      double elapsed = -1;
      EXPECT_TRUE(gst_structure_get_double(s, "elapsed", &elapsed));
      EXPECT_GE(elapsed, 0);
    }
    gst_message_unref(m);
  }
  EXPECT_TRUE(start);
  EXPECT_TRUE(complete);
  EXPECT_TRUE(done);
  EXPECT_GT(total_steps, 0);
  EXPECT_EQ(max_step, total_steps);
  EXPECT_GT(total_chunks, 0);
  EXPECT_EQ(max_chunk, total_chunks);
  EXPECT_EQ(frames, kFrames);
  gst_object_unref(bus);
  gst_object_unref(p);
}

}  // namespace
