// h3videosrc's life cycle on the real engine: unlocking a blocked create(),
// stopping mid-decode, restarting from scratch, many quick cycles, and a slow
// downstream.
#include <dirent.h>
#include <gst/gst.h>
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "clip_params.h"
#include "gst_test_util.h"

namespace {

using h3test::BusRecorder;
using h3test::kFrames;

// Counts what reaches a fakesink (signal-handoffs) and remembers the offsets.
struct SinkLog {
  std::mutex mutex;
  std::vector<guint64> offsets;
  std::vector<bool> discont;
  guint sleep_ms = 0;
  // One long stall of downstream at frame `stall_at`.
  guint64 stall_at = G_MAXUINT64;
  guint stall_ms = 0;
  std::atomic<int> in_flight_max{0};
  BusRecorder* recorder = nullptr;  // for the slow-downstream bound

  void reset() {
    std::lock_guard<std::mutex> lock(mutex);
    offsets.clear();
    discont.clear();
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mutex);
    return offsets.size();
  }
};

void on_handoff(GstElement*, GstBuffer* buf, GstPad*, gpointer data) {
  auto* log = static_cast<SinkLog*>(data);
  size_t received;
  {
    std::lock_guard<std::mutex> lock(log->mutex);
    log->offsets.push_back(GST_BUFFER_OFFSET(buf));
    log->discont.push_back(GST_BUFFER_FLAG_IS_SET(buf, GST_BUFFER_FLAG_DISCONT));
    received = log->offsets.size();
  }
  if (log->recorder) {
    // Frames the engine has handed over so far, minus those that reached here.
    int delivered = 0;
    log->recorder->wait(
        [&](const BusRecorder& r) {
          for (const auto& p : r.progress())
            if (p.phase == "decoding") delivered = std::max(delivered, p.frames);
          return true;
        },
        0);
    const int in_flight = delivered - static_cast<int>(received);
    int prev = log->in_flight_max.load();
    while (in_flight > prev && !log->in_flight_max.compare_exchange_weak(prev, in_flight)) {
    }
  }
  if (log->sleep_ms) g_usleep(log->sleep_ms * 1000);
  if (GST_BUFFER_OFFSET(buf) == log->stall_at) g_usleep(static_cast<gulong>(log->stall_ms) * 1000);
}

struct Pipeline {
  GstElement* pipeline = nullptr;
  GstElement* src = nullptr;
  GstElement* sink = nullptr;
  SinkLog log;

  int64_t frames;
  explicit Pipeline(const std::string& src_props, const std::string& sink_props = "sync=false",
                    int64_t n = kFrames)
      : frames(n) {
    const std::string l = "h3videosrc name=src num-frames=" + std::to_string(n) +
                          " width=" + std::to_string(h3test::kWidth) +
                          " height=" + std::to_string(h3test::kHeight) + " " + src_props +
                          " ! fakesink name=sink signal-handoffs=true " + sink_props;
    pipeline = gst_parse_launch(l.c_str(), nullptr);
    src = h3test::by_name(pipeline, "src");
    sink = h3test::by_name(pipeline, "sink");
    g_signal_connect(sink, "handoff", G_CALLBACK(on_handoff), &log);
  }
  ~Pipeline() {
    gst_element_set_state(pipeline, GST_STATE_NULL);
    gst_object_unref(src);
    gst_object_unref(sink);
    gst_object_unref(pipeline);
  }
  // The whole clip arrived, in order, the first frame flagged DISCONT.
  void expect_whole_clip() {
    std::lock_guard<std::mutex> lock(log.mutex);
    ASSERT_EQ(log.offsets.size(), static_cast<size_t>(frames));
    for (size_t i = 0; i < log.offsets.size(); ++i) {
      EXPECT_EQ(log.offsets[i], i);
      EXPECT_EQ(log.discont[i], i == 0) << i;
    }
  }
};

int thread_count() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

TEST(H3VideoSrcLifecycle, AFlushWakesABlockedCreateAndTheClipIsGeneratedAgain) {
  Pipeline p("");
  BusRecorder rec(p.pipeline);
  gst_element_set_state(p.pipeline, GST_STATE_PLAYING);
  // While the engine denoises, create() waits on the empty queue.
  ASSERT_TRUE(rec.wait_for_phase("denoising", 0, 300)) << rec.error_message();
  EXPECT_TRUE(gst_element_send_event(p.src, gst_event_new_flush_start()));
  EXPECT_TRUE(gst_element_send_event(p.src, gst_event_new_flush_stop(TRUE)));
  ASSERT_TRUE(rec.wait_for_end(300));
  EXPECT_TRUE(rec.eos()) << rec.error_message();
  p.expect_whole_clip();
}

TEST(H3VideoSrcLifecycle, PlayingToReadyWhileCreateWaitsReturns) {
  Pipeline p("");
  BusRecorder rec(p.pipeline);
  gst_element_set_state(p.pipeline, GST_STATE_PLAYING);
  ASSERT_TRUE(rec.wait_for_phase("denoising", 0, 300)) << rec.error_message();
  EXPECT_EQ(gst_element_set_state(p.pipeline, GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
  EXPECT_EQ(p.log.count(), 0u);
}

// Six chunks: a gate after 20 frames holds the clip in its second chunk, with four to come.
constexpr int64_t kLongClip = 97;

// A gate before the sink holds the 21st frame, so with one queued chunk the engine waits
// mid-decode (by construction, not by pacing); going to READY cancels the request (agreed by every
// rank) and PLAYING again starts the clip from its first frame.
void stop_mid_decode_and_restart(const std::string& props) {
  Pipeline p("queue-chunks=1 " + props, "sync=false", kLongClip);
  GstPad* sink_pad = gst_element_get_static_pad(p.sink, "sink");
  h3test::Gate gate(sink_pad, 20);
  gst_object_unref(sink_pad);
  BusRecorder rec(p.pipeline);
  gst_element_set_state(p.pipeline, GST_STATE_PLAYING);
  ASSERT_TRUE(gate.wait_until_holding(300)) << rec.error_message();
  gst_element_set_state(p.pipeline, GST_STATE_PAUSED);
  EXPECT_EQ(gst_element_set_state(p.pipeline, GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
  EXPECT_EQ(p.log.count(), 20u);  // the held frame never arrived: the flush released it
  gate.open();
  p.log.reset();
  rec.clear();
  gst_element_set_state(p.pipeline, GST_STATE_PLAYING);
  ASSERT_TRUE(rec.wait_for_end(300));
  EXPECT_TRUE(rec.eos()) << rec.error_message();
  p.expect_whole_clip();
}

TEST(H3VideoSrcLifecycle, PausedToReadyMidDecodeThenAFreshClipFromTheFirstFrame) {
  stop_mid_decode_and_restart("");
}

TEST(H3VideoSrcLifecycle, OnTwoRanksPausedToReadyMidDecodeThenAFreshClipFromTheFirstFrame) {
  stop_mid_decode_and_restart("ranks=2");
}

// A live source's task runs from PLAYING on, while the model is still loading:
// the start's completion must not wait for a create() that waits for frames
// (a deadlock that hung some live RTP runs). Each cycle keeps the engine open
// (READY), so the start completes fast and races the running task.
TEST(H3VideoSrcLifecycle, LiveStartsStraightToPlayingAlwaysReachEos) {
  Pipeline p("is-live=true", "sync=false", 5);
  BusRecorder rec(p.pipeline);
  for (int i = 0; i < 40; ++i) {
    SCOPED_TRACE(i);
    p.log.reset();
    rec.clear();
    gst_element_set_state(p.pipeline, GST_STATE_PLAYING);
    ASSERT_TRUE(rec.wait_for_end(120)) << "no EOS and no error within 120 s";
    EXPECT_TRUE(rec.eos()) << rec.error_message();
    p.expect_whole_clip();
    ASSERT_EQ(gst_element_set_state(p.pipeline, GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
  }
}

// An application ends the stream early (gst-launch -e on Ctrl-C, a recorder's
// stop button): the element sends EOS at once, after whole frames, in order.
TEST(H3VideoSrcLifecycle, AnEosSentByTheApplicationMidDecodeEndsTheStreamCleanly) {
  Pipeline p("queue-chunks=1", "sync=false", kLongClip);
  GstPad* sink_pad = gst_element_get_static_pad(p.sink, "sink");
  h3test::Gate gate(sink_pad, 20);  // holds the 21st frame: the clip is mid-decode when EOS comes
  gst_object_unref(sink_pad);
  BusRecorder rec(p.pipeline);
  gst_element_set_state(p.pipeline, GST_STATE_PLAYING);
  ASSERT_TRUE(gate.wait_until_holding(300)) << rec.error_message();
  // As gst-launch does it: in PLAYING. (Sent while the pipeline still
  // completes its async PAUSED -> PLAYING, an EOS from the application holds
  // the pipeline's state lock while GstBaseSrc waits for a streaming thread
  // blocked in the sink's preroll, which needs that lock: any source hangs.)
  GstState state = GST_STATE_VOID_PENDING;
  ASSERT_EQ(gst_element_get_state(p.pipeline, &state, nullptr, 60 * GST_SECOND), GST_STATE_CHANGE_SUCCESS);
  ASSERT_EQ(state, GST_STATE_PLAYING);
  // GstBaseSrc takes the EOS under its stream lock, which the streaming thread holds while the
  // gate holds it: the gate opens first, and the EOS follows at once — far sooner than the engine
  // decodes the clip's remaining chunks (it made at most the held one and one queued chunk).
  gate.open();
  EXPECT_TRUE(gst_element_send_event(p.pipeline, gst_event_new_eos()));
  ASSERT_TRUE(rec.wait_for_end(60)) << "no EOS within 60 s of the application's EOS";
  EXPECT_TRUE(rec.eos()) << rec.error_message();
  std::lock_guard<std::mutex> lock(p.log.mutex);
  EXPECT_LT(p.log.offsets.size(), static_cast<size_t>(kLongClip));
  for (size_t i = 0; i < p.log.offsets.size(); ++i) EXPECT_EQ(p.log.offsets[i], i);
}

TEST(H3VideoSrcLifecycle, FiftyCyclesNullPlayingNullMidDecodeNeitherHangNorLeakThreads) {
  Pipeline p("queue-chunks=1", "sync=true");
  BusRecorder rec(p.pipeline);
  int after_first = -1;
  for (int i = 0; i < 50; ++i) {
    SCOPED_TRACE(i);
    rec.clear();
    gst_element_set_state(p.pipeline, GST_STATE_PLAYING);
    ASSERT_TRUE(rec.wait_for_phase("decoding", 1, 300)) << rec.error_message();
    ASSERT_EQ(gst_element_set_state(p.pipeline, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
    if (i == 0) after_first = thread_count();
  }
  // Thread pools made once (LibTorch's, GLib's) are there after the first
  // cycle; nothing may pile up after that.
  EXPECT_LE(thread_count(), after_first + 2);
}

// On two ranks, rank 0 waits in its chunk sink while downstream stalls; its
// peer waits for it without the collective timeout (1 s here), so a stall of
// three timeouts loses nothing (90 frames: more chunks than the queue holds).
TEST(H3VideoSrcLifecycle, OnTwoRanksADownstreamStallLongerThanTheTimeoutLosesNoFrame) {
  Pipeline p("ranks=2 timeout=1 queue-chunks=1", "sync=false", 90);
  BusRecorder rec(p.pipeline);
  p.log.stall_at = 2;
  p.log.stall_ms = 3000;
  gst_element_set_state(p.pipeline, GST_STATE_PLAYING);
  ASSERT_TRUE(rec.wait_for_end(300));
  EXPECT_TRUE(rec.eos()) << rec.error_message();
  EXPECT_FALSE(rec.error()) << rec.error_message();
  p.expect_whole_clip();
}

TEST(H3VideoSrcLifecycle, ASlowDownstreamKeepsFramesInFlightBoundedAndLosesNone) {
  // Enough frames for several chunks.
  Pipeline p("queue-chunks=1", "sync=false", 90);
  BusRecorder rec(p.pipeline);
  p.log.sleep_ms = 20;
  p.log.recorder = &rec;
  gst_element_set_state(p.pipeline, GST_STATE_PLAYING);
  ASSERT_TRUE(rec.wait_for_end(600));
  EXPECT_TRUE(rec.eos()) << rec.error_message();
  p.expect_whole_clip();
  int total_chunks = 0;
  int largest_chunk = 0, prev = 0;
  for (const auto& pr : rec.progress()) {
    if (pr.phase != "decoding") continue;
    total_chunks = pr.total_chunks;
    largest_chunk = std::max(largest_chunk, pr.frames - prev);
    prev = std::max(prev, pr.frames);
  }
  ASSERT_GE(total_chunks, 3) << "the clip needs at least three chunks for this test";
  // One chunk queued plus one being taken apart, whatever the sink's speed.
  EXPECT_LE(p.log.in_flight_max.load(), 2 * largest_chunk);
  EXPECT_LT(p.log.in_flight_max.load(), p.frames);
}

}  // namespace
