// Endless causal streams in the elements (docs/causal.md "Live"): h3src with sampler=causal and
// num-frames -1 never ends by itself; an application EOS ends both pads after whole chunks with
// the soundtrack up to their last frame; a prompt changed while it plays (the `h3-prompt` event
// with a running time, or the `prompt` property during a known chunk) lands at a chunk boundary,
// says so on the bus (`h3-prompt-applied`), and gives the frames of the same timeline given up
// front. Live sources: the latency covers a chunk's production; a pause pushes nothing and the
// stream goes on where it was (probes on the elements' own pads).
#include <gst/app/gstappsink.h>
#include <gst/gst.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "gst_test_util.h"

namespace {

constexpr int kWidth = 80, kHeight = 48;

// Up to `n` more frames from `sink` appended to `out` as bytes (fewer when the stream ends or
// none comes within 120 s).
void pull_frames_into(GstAppSink* sink, int n, std::vector<std::string>* out) {
  for (int i = 0; i < n; ++i) {
    GstSample* s = gst_app_sink_try_pull_sample(sink, 120 * GST_SECOND);
    if (!s) break;
    GstMapInfo m;
    GstBuffer* b = gst_sample_get_buffer(s);
    gst_buffer_map(b, &m, GST_MAP_READ);
    out->emplace_back(reinterpret_cast<const char*>(m.data), m.size);
    gst_buffer_unmap(b, &m);
    gst_sample_unref(s);
  }
}

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
    pull_frames_into(video, n, &out);
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
    const h3::test::TempDir dir("live-timeline");
    const std::string file = dir / "timeline.txt";
    std::ofstream(file) << "# seconds prompt\n4.25 a lighthouse in a storm\n";
    Pipeline p("seed=3 prompt-timeline=" + file);
    ASSERT_EQ(gst_element_set_state(p.pipeline, GST_STATE_PLAYING), GST_STATE_CHANGE_ASYNC);
    up_front = p.pull_frames(8 * 17);
  }
  ASSERT_EQ(live.size(), 136u);
  ASSERT_EQ(up_front.size(), 136u);
  for (size_t i = 0; i < live.size(); ++i) EXPECT_TRUE(live[i] == up_front[i]) << "frame " << i;
}

// Sets the `prompt` property from the engine's own thread when it reports forward `forward`
// (1-based) of chunk `chunk` (a step's report is handed to the element and waited for, and the
// engine looks for a change right after it), so where the change lands does not hang on how fast
// or loaded the machine is.
class PromptDuringChunk {
 public:
  PromptDuringChunk(GstElement* pipeline, GstElement* src, int chunk, int steps, int forward,
                    const char* prompt)
      : bus_(gst_element_get_bus(pipeline)), src_(src), step_(chunk * steps + forward), prompt_(prompt) {
    gst_bus_set_sync_handler(bus_, &PromptDuringChunk::on_message, this, nullptr);
  }
  ~PromptDuringChunk() {
    gst_bus_set_sync_handler(bus_, nullptr, nullptr, nullptr);
    gst_object_unref(bus_);
  }
  bool set() const { return set_; }

 private:
  static GstBusSyncReply on_message(GstBus*, GstMessage* m, gpointer data) {
    auto* self = static_cast<PromptDuringChunk*>(data);
    const GstStructure* s = gst_message_get_structure(m);
    gint step = 0;
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ELEMENT && s && gst_structure_has_name(s, "h3-progress") &&
        g_strcmp0(gst_structure_get_string(s, "phase"), "denoising") == 0 &&
        gst_structure_get_int(s, "step", &step) && step == self->step_ && !self->set_) {
      g_object_set(self->src_, "prompt", self->prompt_, nullptr);
      self->set_ = true;
    }
    return GST_BUS_PASS;
  }
  GstBus* bus_;
  GstElement* src_;
  const int step_;
  const char* prompt_;
  std::atomic<bool> set_{false};
};

// Four chunks of 17 frames, two forwards each, the prompt set during chunk 1's forward `forward`:
// the frames, and the prompt changes the bus reported (chunk, running time).
struct KiteRun {
  std::vector<std::string> frames;
  std::vector<std::pair<gint64, guint64>> applied;
};
constexpr const char* kKite = "a red kite over the sea";
constexpr const char* kKiteClip = "seed=5 steps=2 num-frames=68";

KiteRun kite_during_chunk_1(int forward) {
  KiteRun run;
  Pipeline p(kKiteClip);
  PromptDuringChunk during(p.pipeline, p.src, /*chunk=*/1, /*steps=*/2, forward, kKite);
  EXPECT_EQ(gst_element_set_state(p.pipeline, GST_STATE_PLAYING), GST_STATE_CHANGE_ASYNC);
  run.frames = p.pull_frames(68);
  EXPECT_TRUE(during.set());
  gchar* now = nullptr;
  g_object_get(p.src, "prompt", &now, nullptr);
  EXPECT_STREQ(now, kKite);
  g_free(now);
  run.applied = prompts_applied(p.pipeline);
  return run;
}

// The same clip with `timeline` (a prompt-timeline file's text; empty: none).
std::vector<std::string> kite_clip(const std::string& timeline) {
  const h3::test::TempDir dir("live-kite");
  std::string props = kKiteClip;
  if (!timeline.empty()) {
    const std::string file = dir / "timeline.txt";
    std::ofstream(file) << timeline;
    props += " prompt-timeline=" + file;
  }
  Pipeline p(props);
  EXPECT_EQ(gst_element_set_state(p.pipeline, GST_STATE_PLAYING), GST_STATE_CHANGE_ASYNC);
  return p.pull_frames(68);
}

// Frame by frame: `live` equals `timeline`, and differs from `unchanged` exactly from `first_changed`.
void expect_changed_from(const std::vector<std::string>& live, const std::vector<std::string>& timeline,
                         const std::vector<std::string>& unchanged, size_t first_changed) {
  ASSERT_EQ(live.size(), 68u);
  ASSERT_EQ(timeline.size(), 68u);
  ASSERT_EQ(unchanged.size(), 68u);
  for (size_t i = 0; i < live.size(); ++i) {
    EXPECT_TRUE(live[i] == timeline[i]) << "frame " << i << " differs from the timeline's";
    if (i < first_changed) {
      EXPECT_TRUE(live[i] == unchanged[i]) << "frame " << i << " (before the change) differs";
    } else {
      EXPECT_FALSE(live[i] == unchanged[i]) << "frame " << i << " (under the new prompt) is the old prompt's";
    }
  }
}

TEST(H3SrcLive, ThePromptPropertySetDuringAChunksLastForwardGivesTheNewPromptsFramesFromTheNextChunkOn) {
  // Set during chunk 1's last forward: chunk 1 is made, so chunk 2 (frames 34 to 67, from 34 / 24 s)
  // is the first under it.
  const KiteRun live = kite_during_chunk_1(/*forward=*/2);
  ASSERT_EQ(live.applied.size(), 1u);
  EXPECT_EQ(live.applied[0].first, 2);
  EXPECT_EQ(live.applied[0].second, gst_util_uint64_scale(34, GST_SECOND, 24));  // frame 34's running time
  // The same change up front: chunk 2 is the first to start at or after 1.4 s (34 / 24 s). Chunk 2
  // is the first synthesised under the new prompt, but the decode of chunk 1's frames reads chunk
  // 2's first two latents (the VAE's temporal overlap, core/vae/chunk_plan.h): the new prompt shows
  // from chunk 1's second frame on.
  expect_changed_from(live.frames, kite_clip(std::string("1.4 ") + kKite + "\n"), kite_clip(""), 17 + 1);
}

TEST(H3SrcLive, ThePromptPropertySetDuringAChunksFirstForwardRemakesThatChunkUnderIt) {
  // Set during chunk 1's first forward: chunk 1 begins again under the new prompt (docs/causal.md
  // "Live"), so it is the first under it, from frame 17 (17 / 24 s), and the clip is the one whose
  // timeline changes the prompt at chunk 1's start. Chunk 0's frames are decoded from a clip that
  // takes chunk 1's first two latents, and the first clip's frames are not cross-faded with
  // anything before them: the change shows from frame 0 on.
  const KiteRun live = kite_during_chunk_1(/*forward=*/1);
  ASSERT_EQ(live.applied.size(), 1u);
  EXPECT_EQ(live.applied[0].first, 1);
  EXPECT_EQ(live.applied[0].second, gst_util_uint64_scale(17, GST_SECOND, 24));
  expect_changed_from(live.frames, kite_clip(std::string("0.7 ") + kKite + "\n"), kite_clip(""), 0);
}

// h3videosrc, 16 frames a second, 80x48: `props` added; the video's frames.
struct VideoPipeline {
  GstElement* pipeline = nullptr;
  GstElement* src = nullptr;
  GstAppSink* video = nullptr;
  explicit VideoPipeline(const std::string& props) {
    const std::string desc =
        "h3videosrc name=s sampler=causal framerate=16/1 width=" + std::to_string(kWidth) +
        " height=" + std::to_string(kHeight) + " " + props + " ! appsink name=v sync=false max-buffers=0";
    GError* err = nullptr;
    pipeline = gst_parse_launch(desc.c_str(), &err);
    EXPECT_EQ(err, nullptr) << (err ? err->message : "");
    src = h3test::by_name(pipeline, "s");
    video = GST_APP_SINK(h3test::by_name(pipeline, "v"));
  }
  ~VideoPipeline() {
    gst_element_set_state(pipeline, GST_STATE_NULL);
    gst_object_unref(video);
    gst_object_unref(src);
    gst_object_unref(pipeline);
  }
  void pull_frames(int n, std::vector<std::string>* out) { pull_frames_into(video, n, out); }
};

// queue-chunks=0 on a live stream (docs/element.md): the engine begins each chunk just in time, so
// a prompt change sent as chunk k starts to play is taken by chunk k+2, the first the engine has
// not begun (with queue-chunks=1 it begins chunk k+2 as soon as chunk k is queued, two frames
// before chunk k plays, and the change waits for chunk k+3). 16 frames a second: a chunk plays
// 1.06 s and the tiny model makes one in a fraction of that, so the order does not hang on the
// machine's speed. (h3videosrc: with h3src's soundtrack the engine decodes each chunk's sound after
// its frames are queued, which on the tiny model takes about as long as the chunk plays and makes
// the two settings land alike here.) The change lands where the same change written in a timeline
// lands: the same frames. On two ranks (rank 0 holds, rank 1 waits for it in the decode's
// collectives, and both encode the new prompt) the change lands on the same chunk.
TEST(H3VideoSrcLive, WithQueueChunksZeroAPromptSentAsChunkKPlaysIsTakenByChunkKPlusTwo) {
  const char* storm = "a lighthouse in a storm";
  std::vector<std::string> live, up_front;
  for (const char* ranks : {"ranks=1", "ranks=2"}) {
    VideoPipeline p(std::string("seed=3 is-live=true queue-chunks=0 ") + ranks);
    ASSERT_NE(gst_element_set_state(p.pipeline, GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
    std::vector<std::string> frames;
    p.pull_frames(2 * 17 + 1, &frames);  // up to chunk 2's first frame: chunk 2 plays
    GstStructure* s = gst_structure_new("h3-prompt", "prompt", G_TYPE_STRING, storm, nullptr);
    EXPECT_TRUE(gst_element_send_event(p.src, gst_event_new_custom(GST_EVENT_CUSTOM_UPSTREAM, s)));
    p.pull_frames(6 * 17 - static_cast<int>(frames.size()), &frames);
    EXPECT_EQ(frames.size(), 102u) << ranks;
    const auto applied = prompts_applied(p.pipeline);
    ASSERT_EQ(applied.size(), 1u) << ranks;
    EXPECT_EQ(applied[0].first, 4) << ranks << ": taken by chunk " << applied[0].first
                                   << ", sent as chunk 2 played";
    if (live.empty()) live = std::move(frames);
  }
  {
    // Chunk 4 is the first to start at or after 2.8 s (68 / 24 s on the model's clock).
    const h3::test::TempDir dir("live-just-in-time");
    const std::string file = dir / "timeline.txt";
    std::ofstream(file) << "2.8 " << storm << "\n";
    VideoPipeline p("seed=3 prompt-timeline=" + file);
    ASSERT_NE(gst_element_set_state(p.pipeline, GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
    p.pull_frames(6 * 17, &up_front);
  }
  ASSERT_EQ(live.size(), 102u);
  ASSERT_EQ(up_front.size(), 102u);
  for (size_t i = 0; i < live.size(); ++i) EXPECT_TRUE(live[i] == up_front[i]) << "frame " << i;
}

TEST(H3VideoSrcLive, AnEndlessLiveStreamReportsALatencyOfAtLeastTheTimeAChunkTakes) {
  GError* err = nullptr;
  GstElement* pipeline = gst_parse_launch(
      "h3videosrc name=s sampler=causal is-live=true width=80 height=48 ! appsink name=v sync=false", &err);
  ASSERT_EQ(err, nullptr);
  // No clock: nothing paces the source, so the chunks come at the pace they are made whatever the
  // machine's speed (with a clock, a source faster than real time waits for it and the period
  // between chunks is the clock's 17 / 24 s, not their production).
  gst_pipeline_use_clock(GST_PIPELINE(pipeline), nullptr);
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
  EXPECT_GE(static_cast<double>(min) / GST_SECOND, period) << "the latency must cover the time a chunk takes";
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(src);
  gst_object_unref(sink);
  gst_object_unref(pipeline);
}

// Every buffer a pad pushes, seen by a probe on the pad itself (what downstream holds back cannot
// hide a push): PTS, OFFSET, OFFSET_END, and the phase of the test it came in.
class PushLog {
 public:
  struct Push {
    GstClockTime pts;
    guint64 offset, offset_end;
    int phase;
  };
  explicit PushLog(GstPad* pad) : pad_(pad) {
    probe_ = gst_pad_add_probe(pad_, GST_PAD_PROBE_TYPE_BUFFER, &PushLog::on_buffer, this, nullptr);
  }
  ~PushLog() {
    gst_pad_remove_probe(pad_, probe_);
    gst_object_unref(pad_);
  }
  void set_phase(int phase) { phase_ = phase; }
  // Waits (at most 120 s) until `n` buffers were pushed; whether they were.
  bool wait_for(size_t n) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cond_.wait_for(lock, std::chrono::seconds(120), [&] { return pushes_.size() >= n; });
  }
  std::vector<Push> pushes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return pushes_;
  }

 private:
  static GstPadProbeReturn on_buffer(GstPad*, GstPadProbeInfo* info, gpointer data) {
    auto* self = static_cast<PushLog*>(data);
    GstBuffer* b = GST_PAD_PROBE_INFO_BUFFER(info);
    {
      std::lock_guard<std::mutex> lock(self->mutex_);
      self->pushes_.push_back(
          {GST_BUFFER_PTS(b), GST_BUFFER_OFFSET(b), GST_BUFFER_OFFSET_END(b), self->phase_});
    }
    self->cond_.notify_all();
    return GST_PAD_PROBE_OK;
  }
  GstPad* pad_;
  gulong probe_ = 0;
  std::atomic<int> phase_{0};
  std::mutex mutex_;
  std::condition_variable cond_;
  std::vector<Push> pushes_;
};

TEST(H3SrcLive, IsLiveMakesALiveSourceOnTheRunningClockThatSurvivesAPause) {
  // Downstream of each pad a queue without bounds: nothing downstream can hold a push back, so
  // the probes see what the element itself pushes while PAUSED.
  GError* err = nullptr;
  GstElement* pipeline = gst_parse_launch(
      "h3src name=s sampler=causal is-live=true width=80 height=48 "
      "s.video ! queue max-size-buffers=0 max-size-bytes=0 max-size-time=0 ! fakesink sync=false async=false "
      "s.audio ! audio/x-raw,format=F32LE ! queue max-size-buffers=0 max-size-bytes=0 max-size-time=0 ! "
      "fakesink sync=false async=false",
      &err);
  ASSERT_EQ(err, nullptr);
  GstElement* src = h3test::by_name(pipeline, "s");
  PushLog video(gst_element_get_static_pad(src, "video"));
  PushLog audio(gst_element_get_static_pad(src, "audio"));
  // A live source does not preroll.
  EXPECT_EQ(gst_element_set_state(pipeline, GST_STATE_PAUSED), GST_STATE_CHANGE_NO_PREROLL);
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  ASSERT_TRUE(video.wait_for(30));
  ASSERT_TRUE(audio.wait_for(2));
  GstPad* video_pad = gst_element_get_static_pad(src, "video");
  GstQuery* q = gst_query_new_latency();
  ASSERT_TRUE(gst_pad_query(video_pad, q));
  gst_object_unref(video_pad);
  gboolean live = FALSE;
  GstClockTime min = 0, max = 0;
  gst_query_parse_latency(q, &live, &min, &max);
  gst_query_unref(q);
  EXPECT_TRUE(live);
  EXPECT_GE(min, GST_SECOND / 24);

  // PAUSED: the running time stands still, and a live source pushes nothing. A buffer already past
  // its clock wait when the state changed may still go out: it was due before the pause.
  EXPECT_EQ(gst_element_set_state(pipeline, GST_STATE_PAUSED), GST_STATE_CHANGE_NO_PREROLL);
  video.set_phase(1);
  audio.set_phase(1);
  const GstClockTime paused_at = gst_element_get_start_time(pipeline);  // the running time of the pause
  ASSERT_TRUE(GST_CLOCK_TIME_IS_VALID(paused_at));
  g_usleep(1500 * 1000);  // 36 frames' time: a source that ignored the pause would push them
  video.set_phase(2);
  audio.set_phase(2);
  const size_t before_resume = video.pushes().size();
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  ASSERT_TRUE(video.wait_for(before_resume + 30));
  gint rate = 0;
  GstPad* audio_pad = gst_element_get_static_pad(src, "audio");
  GstCaps* audio_caps = gst_pad_get_current_caps(audio_pad);
  ASSERT_NE(audio_caps, nullptr);
  gst_structure_get_int(gst_caps_get_structure(audio_caps, 0), "rate", &rate);
  gst_caps_unref(audio_caps);
  gst_object_unref(audio_pad);
  gst_element_set_state(pipeline, GST_STATE_NULL);

  const auto vp = video.pushes();
  const auto ap = audio.pushes();
  for (const auto* pushes : {&vp, &ap}) {
    int while_paused = 0;
    for (const auto& b : *pushes) {
      if (b.phase != 1) continue;
      ++while_paused;
      EXPECT_LE(b.pts, paused_at) << "a buffer pushed while PAUSED was not due before the pause";
    }
    EXPECT_LE(while_paused, 1) << (pushes == &vp ? "video" : "audio") << ": pushed while PAUSED";
  }
  // The running time did not move while PAUSED: the stream goes on where it was, frame n at the
  // first frame's running time plus n / 24 s exactly, none skipped, none repeated.
  ASSERT_GE(vp.size(), 60u);
  EXPECT_GT(vp.back().offset, before_resume) << "no frame after the pause";
  for (size_t i = 0; i < vp.size(); ++i) {
    EXPECT_EQ(vp[i].offset, i) << "push " << i;
    EXPECT_EQ(vp[i].pts - vp[0].pts, gst_util_uint64_scale(i, GST_SECOND, 24)) << "frame " << i;
  }
  // The soundtrack shares the anchor: sample s at the first frame's running time plus s / rate,
  // every sample once.
  ASSERT_GT(rate, 0);
  ASSERT_GE(ap.size(), 2u);
  for (size_t i = 0; i < ap.size(); ++i) {
    EXPECT_EQ(ap[i].offset, i == 0 ? 0 : ap[i - 1].offset_end) << "audio push " << i;
    EXPECT_EQ(ap[i].pts, vp[0].pts + gst_util_uint64_scale(ap[i].offset, GST_SECOND, rate))
        << "audio push " << i;
  }
  gst_object_unref(src);
  gst_object_unref(pipeline);
}

TEST(H3VideoSrcLive, APausedLiveSourcePushesNothingAndGoesOnWhereItWas) {
  GError* err = nullptr;
  GstElement* pipeline = gst_parse_launch(
      "h3videosrc name=s sampler=causal is-live=true width=80 height=48 ! "
      "queue max-size-buffers=0 max-size-bytes=0 max-size-time=0 ! fakesink sync=false async=false",
      &err);
  ASSERT_EQ(err, nullptr);
  GstElement* src = h3test::by_name(pipeline, "s");
  PushLog video(gst_element_get_static_pad(src, "src"));
  EXPECT_EQ(gst_element_set_state(pipeline, GST_STATE_PAUSED), GST_STATE_CHANGE_NO_PREROLL);
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  ASSERT_TRUE(video.wait_for(30));
  EXPECT_EQ(gst_element_set_state(pipeline, GST_STATE_PAUSED), GST_STATE_CHANGE_NO_PREROLL);
  video.set_phase(1);
  const GstClockTime paused_at = gst_element_get_start_time(pipeline);
  ASSERT_TRUE(GST_CLOCK_TIME_IS_VALID(paused_at));
  g_usleep(1500 * 1000);
  video.set_phase(2);
  const size_t before_resume = video.pushes().size();
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  ASSERT_TRUE(video.wait_for(before_resume + 30));
  gst_element_set_state(pipeline, GST_STATE_NULL);
  const auto vp = video.pushes();
  int while_paused = 0;
  for (const auto& b : vp) {
    if (b.phase != 1) continue;
    ++while_paused;
    EXPECT_LE(b.pts, paused_at) << "a buffer pushed while PAUSED was not due before the pause";
  }
  EXPECT_LE(while_paused, 1) << "pushed while PAUSED";
  for (size_t i = 0; i < vp.size(); ++i) {
    EXPECT_EQ(vp[i].offset, i) << "push " << i;
    EXPECT_EQ(vp[i].pts - vp[0].pts, gst_util_uint64_scale(i, GST_SECOND, 24)) << "frame " << i;
  }
  gst_object_unref(src);
  gst_object_unref(pipeline);
}

// The warnings on the bus that contain `words`.
int warnings_with(GstElement* pipeline, const std::string& words) {
  int n = 0;
  GstBus* bus = gst_element_get_bus(pipeline);
  while (GstMessage* m = gst_bus_pop_filtered(bus, GST_MESSAGE_WARNING)) {
    GError* err = nullptr;
    gst_message_parse_warning(m, &err, nullptr);
    if (std::string(err->message).find(words) != std::string::npos) ++n;
    g_error_free(err);
    gst_message_unref(m);
  }
  gst_object_unref(bus);
  return n;
}

// positions=absolute on an endless stream is taken, and warned about once (GST_MESSAGE_WARNING):
// its positions leave the trained clip's; the default (auto: relative) is not.
TEST(H3SrcLive, AnEndlessStreamWithAbsolutePositionsWarnsOnce) {
  const std::string words = "positions = absolute on an endless stream: from chunk ";
  {
    Pipeline p("positions=absolute prompt-switch=recache");
    gint positions = -1, recache = -1;
    g_object_get(p.src, "positions", &positions, "prompt-switch", &recache, nullptr);
    EXPECT_EQ(positions, 1);  // h3::CausalPositions::kAbsolute
    EXPECT_EQ(recache, 1);    // h3::PromptSwitch::kRecache
    ASSERT_EQ(gst_element_set_state(p.pipeline, GST_STATE_PLAYING), GST_STATE_CHANGE_ASYNC);
    // The tiny default's trained length is 4 chunks: chunk 3 (from frame 51) is the first past
    // it, and the warning comes once, as that chunk's first frame is pushed (its details say so).
    EXPECT_EQ(p.pull_frames(5 * 17).size(), 85u);
    std::vector<std::string> details;
    GstBus* bus = gst_element_get_bus(p.pipeline);
    while (GstMessage* m = gst_bus_pop_filtered(bus, GST_MESSAGE_WARNING)) {
      GError* err = nullptr;
      gchar* debug = nullptr;
      gst_message_parse_warning(m, &err, &debug);
      if (std::string(err->message).find(words + "3 ") != std::string::npos)
        details.emplace_back(debug ? debug : "");
      g_error_free(err);
      g_free(debug);
      gst_message_unref(m);
    }
    gst_object_unref(bus);
    ASSERT_EQ(details.size(), 1u);
    EXPECT_NE(details[0].find("positions=absolute, frame 51"), std::string::npos) << details[0];
  }
  Pipeline p("");
  ASSERT_EQ(gst_element_set_state(p.pipeline, GST_STATE_PLAYING), GST_STATE_CHANGE_ASYNC);
  EXPECT_EQ(p.pull_frames(17).size(), 17u);
  EXPECT_EQ(warnings_with(p.pipeline, "positions = absolute"), 0);
}

TEST(H3SrcLive, AnEmptyPromptEventIsRefusedAndABadTimelineFailsTheStartNamingTheFile) {
  {
    Pipeline p("");
    ASSERT_EQ(gst_element_set_state(p.pipeline, GST_STATE_PLAYING), GST_STATE_CHANGE_ASYNC);
    EXPECT_EQ(p.pull_frames(17).size(), 17u);
    GstStructure* s = gst_structure_new("h3-prompt", "prompt", G_TYPE_STRING, "", nullptr);
    EXPECT_FALSE(gst_element_send_event(p.src, gst_event_new_custom(GST_EVENT_CUSTOM_UPSTREAM, s)));
  }
  const h3::test::TempDir dir("bad-timeline");
  const std::string file = dir / "timeline.txt";
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
}

}  // namespace
