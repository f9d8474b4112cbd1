// h3src on the real engine and the tiny default model (which has an audio VAE): both pads'
// caps, timestamps and EOS on one timeline, S16LE negotiation, state cycling, one slow or
// unlinked pad holding nothing back, a model without audio_vae/, both pads'
// durations, and an application's EOS leaving a playable MP4.
#include <glib/gstdio.h>
#include <gst/audio/audio.h>
#include <gst/gst.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "clip_params.h"
#include "gst_test_util.h"

namespace {

using h3test::kFrames;
using h3test::kHeight;
using h3test::kWidth;

constexpr int64_t kRate = 32000;
// 800 * round(22 * 5 / 3) = 800 * 37: the soundtrack of 22 frames (docs/engine.md "Audio").
constexpr int64_t kSamples = 800 * ((kFrames * 5 + 1) / 3);

std::string element(const std::string& extra = "") {
  return "h3src name=s num-frames=" + std::to_string(kFrames) + " width=" + std::to_string(kWidth) +
         " height=" + std::to_string(kHeight) + " " + extra;
}

// What one sink pad received: buffers' times and offsets, the bytes (audio), caps and EOS.
struct Received {
  std::mutex m;
  std::vector<GstClockTime> pts, duration;
  std::vector<guint64> offset, offset_end;
  std::vector<uint8_t> bytes;
  bool keep_bytes = false;
  bool eos = false;
  std::string caps;

  void clear() {
    std::lock_guard<std::mutex> lock(m);
    pts.clear();
    duration.clear();
    offset.clear();
    offset_end.clear();
    bytes.clear();
    eos = false;
    caps.clear();
  }

  static GstPadProbeReturn probe(GstPad* pad, GstPadProbeInfo* info, gpointer data) {
    auto* self = static_cast<Received*>(data);
    std::lock_guard<std::mutex> lock(self->m);
    if (GST_PAD_PROBE_INFO_TYPE(info) & GST_PAD_PROBE_TYPE_BUFFER) {
      GstBuffer* b = GST_PAD_PROBE_INFO_BUFFER(info);
      self->pts.push_back(GST_BUFFER_PTS(b));
      self->duration.push_back(GST_BUFFER_DURATION(b));
      self->offset.push_back(GST_BUFFER_OFFSET(b));
      self->offset_end.push_back(GST_BUFFER_OFFSET_END(b));
      if (self->keep_bytes) {
        GstMapInfo map;
        if (gst_buffer_map(b, &map, GST_MAP_READ)) {
          self->bytes.insert(self->bytes.end(), map.data, map.data + map.size);
          gst_buffer_unmap(b, &map);
        }
      }
    } else if (GstEvent* e = GST_PAD_PROBE_INFO_EVENT(info)) {
      if (GST_EVENT_TYPE(e) == GST_EVENT_EOS) self->eos = true;
      if (GST_EVENT_TYPE(e) == GST_EVENT_CAPS) {
        GstCaps* caps = nullptr;
        gst_event_parse_caps(e, &caps);
        gchar* s = gst_caps_to_string(caps);
        self->caps = s;
        g_free(s);
      }
    }
    (void)pad;
    return GST_PAD_PROBE_OK;
  }
};

void watch(GstElement* pipeline, const char* sink, Received* r) {
  GstElement* e = h3test::by_name(pipeline, sink);
  ASSERT_NE(e, nullptr) << sink;
  GstPad* pad = gst_element_get_static_pad(e, "sink");
  gst_pad_add_probe(
      pad, static_cast<GstPadProbeType>(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM),
      &Received::probe, r, nullptr);
  gst_object_unref(pad);
  gst_object_unref(e);
}

GstElement* parse(const std::string& launch) {
  GError* err = nullptr;
  GstElement* p = gst_parse_launch(launch.c_str(), &err);
  EXPECT_EQ(err, nullptr) << (err ? err->message : "");
  if (err) g_error_free(err);
  return p;
}

// Runs `launch` (sinks named v and a, either may be absent) to the end.
h3test::RunResult run(const std::string& launch, Received* v, Received* a) {
  GstElement* p = parse(launch);
  if (v) watch(p, "v", v);
  if (a) watch(p, "a", a);
  h3test::RunResult r = h3test::run_to_end(p, 600);
  gst_object_unref(p);
  return r;
}

GstClockTime frame_at(int64_t n) {
  return gst_util_uint64_scale(n, GST_SECOND, 24);
}
GstClockTime sample_at(int64_t n) {
  return gst_util_uint64_scale(n, GST_SECOND, kRate);
}

// Every frame once, in order, on the 24 fps timeline from 0.
void expect_whole_video(const Received& v) {
  ASSERT_EQ(static_cast<int64_t>(v.pts.size()), kFrames);
  for (int64_t n = 0; n < kFrames; ++n) {
    EXPECT_EQ(v.pts[n], frame_at(n)) << "frame " << n;
    EXPECT_EQ(v.duration[n], frame_at(n + 1) - frame_at(n)) << "frame " << n;
    EXPECT_EQ(v.offset[n], static_cast<guint64>(n));
  }
  EXPECT_TRUE(v.eos);
}

// Contiguous sample ranges from 0 to kSamples, timestamps from the sample counts.
void expect_whole_audio(const Received& a) {
  ASSERT_FALSE(a.pts.empty());
  guint64 next = 0;
  for (size_t i = 0; i < a.pts.size(); ++i) {
    ASSERT_EQ(a.offset[i], next) << "buffer " << i;
    ASSERT_GT(a.offset_end[i], a.offset[i]);
    EXPECT_EQ(a.pts[i], sample_at(static_cast<int64_t>(a.offset[i])));
    EXPECT_EQ(a.pts[i] + a.duration[i], sample_at(static_cast<int64_t>(a.offset_end[i])));
    next = a.offset_end[i];
  }
  EXPECT_EQ(static_cast<int64_t>(next), kSamples);
  EXPECT_TRUE(a.eos);
}

TEST(H3Src, BothPadsCarryTheWholeClipOnOneTimelineThenEos) {
  Received v, a;
  const auto r =
      run(element() + " s.video ! fakesink name=v sync=false s.audio ! fakesink name=a sync=false", &v, &a);
  ASSERT_FALSE(r.error) << r.message;
  ASSERT_TRUE(r.eos);
  expect_whole_video(v);
  expect_whole_audio(a);
  EXPECT_NE(v.caps.find("width=(int)80"), std::string::npos) << v.caps;
  EXPECT_NE(a.caps.find("format=(string)F32LE"), std::string::npos) << a.caps;
  EXPECT_NE(a.caps.find("rate=(int)32000"), std::string::npos) << a.caps;
  EXPECT_NE(a.caps.find("channels=(int)2"), std::string::npos) << a.caps;
  EXPECT_NE(a.caps.find("layout=(string)interleaved"), std::string::npos) << a.caps;
  // The soundtrack's end is the video's within 400 samples (12.5 ms).
  const GstClockTime video_end = frame_at(kFrames), audio_end = sample_at(kSamples);
  const GstClockTime diff = video_end > audio_end ? video_end - audio_end : audio_end - video_end;
  EXPECT_LE(diff, sample_at(400));
}

TEST(H3Src, S16LeIsTheF32SamplesClampedScaledAndRounded) {
  Received f32, s16;
  f32.keep_bytes = s16.keep_bytes = true;
  auto r = run(element("seed=5") + " s.video ! fakesink sync=false s.audio ! fakesink name=a sync=false",
               nullptr, &f32);
  ASSERT_FALSE(r.error) << r.message;
  r = run(
      element("seed=5") +
          " s.video ! fakesink sync=false s.audio ! audio/x-raw,format=S16LE ! fakesink name=a sync=false",
      nullptr, &s16);
  ASSERT_FALSE(r.error) << r.message;
  EXPECT_NE(s16.caps.find("S16LE"), std::string::npos) << s16.caps;
  ASSERT_EQ(f32.bytes.size(), static_cast<size_t>(kSamples * 2 * 4));
  ASSERT_EQ(s16.bytes.size(), static_cast<size_t>(kSamples * 2 * 2));
  const auto* fv = reinterpret_cast<const float*>(f32.bytes.data());
  const auto* sv = reinterpret_cast<const int16_t*>(s16.bytes.data());
  int64_t nonzero = 0, mismatched = 0;
  for (int64_t i = 0; i < kSamples * 2; ++i) {
    const float x = fv[i];
    ASSERT_TRUE(std::isfinite(x));
    ASSERT_LE(std::fabs(x), 1.0f);
    nonzero += x != 0.0f;
    mismatched += sv[i] != static_cast<int16_t>(std::lrintf(std::clamp(x, -1.0f, 1.0f) * 32767.0f));
  }
  EXPECT_EQ(mismatched, 0);
  EXPECT_GT(nonzero, kSamples);  // a soundtrack, not silence
}

TEST(H3Src, ASlowAudioSinkLosesNoVideoFrame) {
  Received v, a;
  // 100 ms per audio buffer of 1024 samples (32 ms): the audio side runs ~3x slower than
  // real time, back-pressure reaches the engine through the audio queue.
  const auto r = run(element("queue-chunks=1") +
                         " s.video ! fakesink name=v sync=false s.audio ! identity sleep-time=100000 ! "
                         "fakesink name=a sync=false",
                     &v, &a);
  ASSERT_FALSE(r.error) << r.message;
  expect_whole_video(v);
  expect_whole_audio(a);
}

TEST(H3Src, ASlowVideoSinkLosesNoAudio) {
  Received v, a;
  const auto r = run(element("queue-chunks=1") +
                         " s.video ! identity sleep-time=100000 ! fakesink name=v sync=false "
                         "s.audio ! fakesink name=a sync=false",
                     &v, &a);
  ASSERT_FALSE(r.error) << r.message;
  expect_whole_video(v);
  expect_whole_audio(a);
}

TEST(H3Src, AnUnlinkedAudioPadHoldsNothingBack) {
  Received v;
  const auto r = run(element() + " s.video ! fakesink name=v sync=false", &v, nullptr);
  ASSERT_FALSE(r.error) << r.message;
  ASSERT_TRUE(r.eos);
  expect_whole_video(v);
}

TEST(H3Src, StateCyclingStartsTheClipAgainFromTheFirstFrame) {
  GstElement* p =
      parse(element() + " s.video ! fakesink name=v sync=false s.audio ! fakesink name=a sync=false");
  // Up and down before and after prerolling: no hang, no leak of a task or worker.
  for (int i = 0; i < 2; ++i) {
    ASSERT_NE(gst_element_set_state(p, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
    ASSERT_EQ(gst_element_set_state(p, GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
    ASSERT_NE(gst_element_set_state(p, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
    GstState state;
    ASSERT_EQ(gst_element_get_state(p, &state, nullptr, 300 * GST_SECOND), GST_STATE_CHANGE_SUCCESS);
    EXPECT_EQ(state, GST_STATE_PAUSED);
    ASSERT_EQ(gst_element_set_state(p, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  }
  Received v, a;
  watch(p, "v", &v);
  watch(p, "a", &a);
  for (int i = 0; i < 2; ++i) {
    v.clear();
    a.clear();
    const auto r = h3test::run_to_end(p, 600);  // ends in NULL
    ASSERT_FALSE(r.error) << r.message;
    ASSERT_TRUE(r.eos);
    expect_whole_video(v);
    expect_whole_audio(a);
  }
  gst_object_unref(p);
}

TEST(H3Src, AFlushGeneratesTheClipAgainOnBothPads) {
  GstElement* p =
      parse(element() + " s.video ! fakesink name=v sync=false s.audio ! fakesink name=a sync=false");
  Received v, a;
  watch(p, "v", &v);
  watch(p, "a", &a);
  h3test::BusRecorder rec(p);
  gst_element_set_state(p, GST_STATE_PLAYING);
  // Mid-denoise (nothing out yet) and again once both pads pushed data.
  ASSERT_TRUE(rec.wait_for_phase("denoising", 0, 300)) << rec.error_message();
  GstElement* src = h3test::by_name(p, "s");
  EXPECT_TRUE(gst_element_send_event(src, gst_event_new_flush_start()));
  EXPECT_TRUE(gst_element_send_event(src, gst_event_new_flush_stop(TRUE)));
  // The flush made the sinks lose their state: the pipeline is PLAYING again once both have
  // prerolled on the regenerated clip. A second flush before the bin has finished resuming
  // PLAYING leaves the sinks PAUSED for good — the bin ignores their lost state while its own
  // state change runs ("state change busy", then "nothing pending" in GST_STATES) — and the clip
  // never ends (1 run in 20-40 under load). Applications wait for the state in between, as here.
  ASSERT_EQ(gst_element_get_state(p, nullptr, nullptr, 300 * GST_SECOND), GST_STATE_CHANGE_SUCCESS);
  ASSERT_TRUE(rec.wait_for_phase("decoding", 1, 300)) << rec.error_message();
  EXPECT_TRUE(gst_element_send_event(src, gst_event_new_flush_start()));
  EXPECT_TRUE(gst_element_send_event(src, gst_event_new_flush_stop(TRUE)));
  v.clear();
  a.clear();
  ASSERT_TRUE(rec.wait_for_end(300));
  EXPECT_TRUE(rec.eos()) << rec.error_message();
  gst_element_set_state(p, GST_STATE_NULL);
  // After the last flush: the whole clip on both pads, from frame 0 and sample 0.
  expect_whole_video(v);
  expect_whole_audio(a);
  gst_object_unref(src);
  gst_object_unref(p);
}

TEST(H3Src, SeeksAreRefused) {
  GstElement* p = parse(element() + " s.video ! fakesink sync=false s.audio ! fakesink sync=false");
  ASSERT_NE(gst_element_set_state(p, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  ASSERT_EQ(gst_element_get_state(p, nullptr, nullptr, 300 * GST_SECOND), GST_STATE_CHANGE_SUCCESS);
  EXPECT_FALSE(gst_element_seek_simple(p, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH, GST_SECOND / 2));
  gint64 d = -1;
  EXPECT_TRUE(gst_element_query_duration(p, GST_FORMAT_TIME, &d));
  EXPECT_GT(d, 0);
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(p);
}

// The DURATION each pad answers once the clip is planned: the video's frames at 24 fps, the
// soundtrack's samples at the model's rate; they end within one frame of each other.
TEST(H3Src, TheAudioPadsDurationIsTheVideosWithinOneFrame) {
  GstElement* p = parse(element() + " s.video ! fakesink s.audio ! fakesink");
  ASSERT_EQ(gst_element_set_state(p, GST_STATE_PAUSED), GST_STATE_CHANGE_ASYNC);
  ASSERT_EQ(gst_element_get_state(p, nullptr, nullptr, 120 * GST_SECOND), GST_STATE_CHANGE_SUCCESS);
  GstElement* src = h3test::by_name(p, "s");
  gint64 video = -1, audio = -1;
  GstPad* vpad = gst_element_get_static_pad(src, "video");
  GstPad* apad = gst_element_get_static_pad(src, "audio");
  EXPECT_TRUE(gst_pad_query_duration(vpad, GST_FORMAT_TIME, &video));
  EXPECT_TRUE(gst_pad_query_duration(apad, GST_FORMAT_TIME, &audio));
  EXPECT_EQ(video, static_cast<gint64>(frame_at(kFrames)));
  EXPECT_EQ(audio, static_cast<gint64>(sample_at(kSamples)));
  EXPECT_LE(std::llabs(video - audio), static_cast<long long>(frame_at(1)));
  gst_object_unref(vpad);
  gst_object_unref(apad);
  gst_object_unref(src);
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(p);
}

// gst-launch-1.0 -e (or Ctrl-C with it): the application sends EOS to the pipeline mid-clip.
// Both pads must end with EOS, so that mp4mux writes its index and the file plays with both
// streams, each shorter than the whole clip.
TEST(H3Src, AnApplicationEosEndsBothPadsAndLeavesAPlayableMp4WithBothStreams) {
  const h3::test::TempDir dir("gst-eos");
  const std::string out = dir / "cut.mp4";
  constexpr int64_t kLong = 124;  // eight chunks: the EOS lands long before the end
  GstElement* p = parse("h3src name=s num-frames=" + std::to_string(kLong) +
                        " width=" + std::to_string(kWidth) + " height=" + std::to_string(kHeight) +
                        " s.video ! queue ! videoconvert ! x264enc ! mux. s.audio ! queue ! audioconvert ! "
                        "avenc_aac ! mux. mp4mux name=mux ! filesink location=" +
                        out);
  Received v;
  GstElement* src = h3test::by_name(p, "s");
  GstPad* vpad = gst_element_get_static_pad(src, "video");
  gst_pad_add_probe(vpad, GST_PAD_PROBE_TYPE_BUFFER, &Received::probe, &v, nullptr);
  gst_element_set_state(p, GST_STATE_PLAYING);
  // Waits for the first chunk's frames, then ends the clip as gst-launch-1.0 -e does.
  for (int i = 0; i < 1200; ++i) {
    {
      std::lock_guard<std::mutex> lock(v.m);
      if (v.pts.size() >= 17) break;
    }
    g_usleep(100 * 1000);
  }
  {
    std::lock_guard<std::mutex> lock(v.m);
    ASSERT_GE(v.pts.size(), 17u) << "no chunk within 120 s";
  }
  gst_element_send_event(p, gst_event_new_eos());
  GstBus* bus = gst_element_get_bus(p);
  GstMessage* m = gst_bus_timed_pop_filtered(
      bus, 120 * GST_SECOND, static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  ASSERT_NE(m, nullptr) << "no EOS within 120 s of the application's EOS: a pad did not end";
  EXPECT_EQ(GST_MESSAGE_TYPE(m), GST_MESSAGE_EOS);
  gst_message_unref(m);
  gst_object_unref(bus);
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(vpad);
  gst_object_unref(src);
  gst_object_unref(p);
  size_t pushed = 0;
  {
    std::lock_guard<std::mutex> lock(v.m);
    pushed = v.pts.size();
  }
  EXPECT_LT(static_cast<int64_t>(pushed), kLong) << "the EOS came after the whole clip";

  // The file plays: both streams, the video ending after the first chunk and both before the
  // whole clip (the audio of the chunks whose frames went out may not have been decoded yet).
  const std::string probe =
      "ffprobe -v error -show_entries stream=codec_type,duration -of csv=p=0 '" + out + "'";
  FILE* f = popen(probe.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string text;
  char line[256];
  while (fgets(line, sizeof line, f)) text += line;
  ASSERT_EQ(pclose(f), 0) << text << " (" << out << ")";
  double vdur = -1, adur = -1;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    const std::string row = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    const size_t comma = row.find(',');
    if (comma != std::string::npos) {
      const double d = std::atof(row.c_str() + comma + 1);
      if (row.compare(0, comma, "video") == 0) vdur = d;
      if (row.compare(0, comma, "audio") == 0) adur = d;
    }
    if (end == std::string::npos) break;
    at = end + 1;
  }
  EXPECT_GE(vdur, 17.0 / 24 - 1e-3) << text;
  EXPECT_LT(vdur, kLong / 24.0) << text;
  EXPECT_GE(adur, 0.0) << text;
  EXPECT_LT(adur, kLong / 24.0) << text;
}

// Fills the folder `out` with a copy of the tiny model without audio_vae/ (links to everything else).
void link_model_without_audio(const std::string& out) {
  namespace fs = std::filesystem;
  const char* tiny = std::getenv("H3_TINY_MODEL");
  EXPECT_NE(tiny, nullptr);
  for (const auto& e : fs::directory_iterator(tiny ? tiny : "/nonexistent")) {
    if (e.path().filename() != "audio_vae") fs::create_symlink(e.path(), fs::path(out) / e.path().filename());
  }
}

TEST(H3Src, AModelWithoutAnAudioVaeIsAnErrorNamingTheFolderWhileH3VideoSrcWorks) {
  const h3::test::TempDir dir("gst-noaudio");
  const std::string& model = dir.str();
  link_model_without_audio(model);
  const auto r =
      run(element("model=" + model) + " s.video ! fakesink sync=false s.audio ! fakesink sync=false", nullptr,
          nullptr);
  ASSERT_TRUE(r.error);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.domain, GST_RESOURCE_ERROR);
  EXPECT_EQ(r.code, GST_RESOURCE_ERROR_NOT_FOUND);
  EXPECT_NE(r.message.find(model + "/audio_vae"), std::string::npos) << r.message;

  Received v;
  const auto ok = run("h3videosrc model=" + model + " num-frames=" + std::to_string(kFrames) +
                          " width=" + std::to_string(kWidth) + " height=" + std::to_string(kHeight) +
                          " ! fakesink name=v sync=false",
                      &v, nullptr);
  EXPECT_FALSE(ok.error) << ok.message;
  expect_whole_video(v);
}

}  // namespace
