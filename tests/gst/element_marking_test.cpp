// Marking (docs/element.md, "Marking"): an MP4 of h3src through mp4mux and h3mark says that it is
// generated and how (IPTC's digital source type and AI fields, the model's hash, the prompts, the
// seed, the sampler) in XMP that exiftool reads; h3src's `prompts` pad gives the MP4 a text track
// with each chunk's prompt at the running time it took effect; `h3 replay` makes the same frames
// and soundtrack again from the file, and refuses a file that is not marked, a tampered prompt
// track or record, and other weights, naming what differs.
#include <glib.h>
#include <glib/gstdio.h>
#include <gst/app/gstappsink.h>
#include <gst/gst.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../temp_dir.h"
#include "gst_test_util.h"

namespace {

constexpr const char* kSourceType = "http://cv.iptc.org/newscodes/digitalsourcetype/trainedAlgorithmicMedia";

std::string model_dir() {
  const char* d = g_getenv("H3_MODEL_DIR");
  return d ? d : "";
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs argv; its stdout, stderr and whether it exited 0.
struct Ran {
  std::string out, err;
  bool ok = false;
};
Ran spawn(std::vector<std::string> args) {
  std::vector<gchar*> argv;
  for (std::string& a : args) argv.push_back(&a[0]);
  argv.push_back(nullptr);
  gchar *out = nullptr, *err = nullptr;
  gint status = 0;
  Ran r;
  GError* e = nullptr;
  if (!g_spawn_sync(nullptr, argv.data(), nullptr, G_SPAWN_SEARCH_PATH, nullptr, nullptr, &out, &err, &status,
                    &e)) {
    r.err = e ? e->message : "spawn failed";
    g_clear_error(&e);
    return r;
  }
  r.out = out ? out : "";
  r.err = err ? err : "";
  r.ok = g_spawn_check_wait_status(status, nullptr);
  g_free(out);
  g_free(err);
  return r;
}

// The value of one tag as exiftool reads it, exactly (-b).
std::string exif(const std::string& file, const std::string& tag) {
  return spawn({"exiftool", "-b", "-" + tag, file}).out;
}

struct Stream {
  std::string mp4, video, audio;
  std::vector<std::pair<gint64, guint64>> applied;  // h3-prompt-applied: chunk, running time
  h3test::RunResult result;
};

constexpr const char* kUnbounded = "queue max-size-buffers=0 max-size-time=0 max-size-bytes=0";

// h3src at 80x48 with `prompt` into an MP4 (H.264, AAC, the prompts as tx3g, through h3mark unless `mark` is
// false), its RGB frames and F32LE soundtrack also written as they were pushed. `live_prompt`:
// sent as an h3-prompt event for `live_at` once the pipeline prerolled.
Stream make_stream(const std::string& dir, const std::string& props, const std::string& prompt,
                   bool mark = true, const std::string& live_prompt = "", double live_at = 0) {
  Stream s{dir + "/clip.mp4", dir + "/video.rgb", dir + "/audio.f32", {}, {}};
  const std::string desc = std::string("h3src name=s width=80 height=48 ") + props +
                           " s.video ! video/x-raw,format=RGB ! tee name=tv  tv. ! " + kUnbounded +
                           " ! filesink location=" + s.video + "  tv. ! " + kUnbounded +
                           " ! videoconvert ! x264enc tune=zerolatency speed-preset=ultrafast ! mux.  "
                           "s.audio ! audio/x-raw,format=F32LE ! "
                           "tee name=ta  ta. ! " +
                           kUnbounded + " ! filesink location=" + s.audio + "  ta. ! " + kUnbounded +
                           " ! audioconvert ! avenc_aac ! mux.  s.prompts ! " + kUnbounded +
                           " ! mux.subtitle_0  mp4mux name=mux ! " + (mark ? "h3mark ! " : "") +
                           "filesink location=" + s.mp4;
  GError* err = nullptr;
  GstElement* pipeline = gst_parse_launch(desc.c_str(), &err);
  EXPECT_EQ(err, nullptr) << (err ? err->message : "");
  if (!pipeline) return s;
  GstElement* h3src = h3test::by_name(pipeline, "s");
  g_object_set(h3src, "prompt", prompt.c_str(), nullptr);
  gst_object_unref(h3src);
  GstBus* bus = gst_element_get_bus(pipeline);
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  if (!live_prompt.empty()) {
    EXPECT_EQ(gst_element_get_state(pipeline, nullptr, nullptr, 120 * GST_SECOND), GST_STATE_CHANGE_SUCCESS);
    GstElement* src = h3test::by_name(pipeline, "s");
    GstStructure* st =
        gst_structure_new("h3-prompt", "prompt", G_TYPE_STRING, live_prompt.c_str(), "running-time",
                          G_TYPE_UINT64, static_cast<guint64>(live_at * GST_SECOND), nullptr);
    EXPECT_TRUE(gst_element_send_event(src, gst_event_new_custom(GST_EVENT_CUSTOM_UPSTREAM, st)));
    gst_object_unref(src);
  }
  std::vector<GstMessage*> kept;
  s.result = h3test::wait_for_end(bus, 600, &kept);
  gst_element_set_state(pipeline, GST_STATE_NULL);
  for (GstMessage* m : kept) {
    const GstStructure* st = gst_message_get_structure(m);
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ELEMENT && st && gst_structure_has_name(st, "h3-prompt-applied")) {
      gint64 chunk = -1;
      guint64 at = 0;
      gst_structure_get_int64(st, "chunk", &chunk);
      gst_structure_get_uint64(st, "running-time", &at);
      s.applied.emplace_back(chunk, at);
    }
    gst_message_unref(m);
  }
  gst_object_unref(bus);
  gst_object_unref(pipeline);
  return s;
}

// The MP4's text track as qtdemux gives it: (PTS, text).
std::vector<std::pair<GstClockTime, std::string>> text_track(const std::string& mp4) {
  const std::string desc = "filesrc location=" + mp4 + " ! qtdemux ! text/x-raw ! appsink name=t sync=false";
  GstElement* p = gst_parse_launch(desc.c_str(), nullptr);
  GstAppSink* sink = GST_APP_SINK(h3test::by_name(p, "t"));
  gst_element_set_state(p, GST_STATE_PLAYING);
  std::vector<std::pair<GstClockTime, std::string>> out;
  while (GstSample* s = gst_app_sink_try_pull_sample(sink, 30 * GST_SECOND)) {
    GstBuffer* b = gst_sample_get_buffer(s);
    GstMapInfo m;
    gst_buffer_map(b, &m, GST_MAP_READ);
    out.emplace_back(GST_BUFFER_PTS(b), std::string(reinterpret_cast<const char*>(m.data), m.size));
    gst_buffer_unmap(b, &m);
    gst_sample_unref(s);
  }
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(sink);
  gst_object_unref(p);
  return out;
}

Ran replay(const std::string& mp4, const std::string& dir, const std::string& model = model_dir()) {
  return spawn({H3_BIN, "replay", mp4, "--model", model, "--video", dir + "/replay.rgb", "--audio",
                dir + "/replay.f32", "--quiet"});
}

// The two prompt changes of the replay test: one from the timeline (chunk 2), one live.
constexpr const char* kFirst = "a red circle moving right on a black background";
constexpr const char* kSecond = "a green square moving down on a white background";
constexpr const char* kThird = "a yellow triangle moving up on a gray background";

TEST(H3Marking, AnMp4ThroughH3markSaysInXmpThatItIsGeneratedAndHowAndExiftoolReadsIt) {
  h3::test::TempDir dir("marking");
  // 10 kB over several lines, with XML's special characters: every byte reaches the XMP.
  std::string prompt = "a red <circle> & a \"square\"\n";
  while (prompt.size() < 10240) prompt += "moving right on a black background, frame after frame\n";
  const std::string timeline = dir.str() + "/timeline.txt";
  std::ofstream(timeline) << "0.75 " << kSecond << "\n";
  const Stream s = make_stream(
      dir.str(), "sampler=causal num-frames=56 seed=7 steps=2 prompt-timeline=" + timeline, prompt);
  ASSERT_TRUE(s.result.eos) << s.result.message << " " << s.result.debug;
  EXPECT_EQ(exif(s.mp4, "XMP-iptcExt:DigitalSourceType"), kSourceType);
  EXPECT_EQ(exif(s.mp4, "XMP-iptcExt:AIPromptInformation"), prompt + "\nfrom 1.417 s (chunk 2): " + kSecond);
  EXPECT_EQ(exif(s.mp4, "XMP-h3:Seed"), "7");
  EXPECT_EQ(exif(s.mp4, "XMP-h3:Sampler"), "causal");
  // The model's hash as coreutils computes it (docs/element.md, "Marking").
  const Ran sha =
      spawn({"bash", "-c",
             "cd \"$H3_MODEL_DIR\" && find . -name '*.safetensors' -printf '%P\\n' | LC_ALL=C sort | "
             "xargs -d '\\n' sha256sum | sha256sum | cut -c1-64"});
  ASSERT_TRUE(sha.ok) << sha.err;
  EXPECT_EQ(exif(s.mp4, "XMP-h3:ModelSHA256") + "\n", sha.out);
  EXPECT_NE(exif(s.mp4, "XMP-iptcExt:AISystemVersionUsed").find(sha.out.substr(0, 64)), std::string::npos);
  EXPECT_EQ(exif(s.mp4, "XMP-h3:Model"), g_path_get_basename(model_dir().c_str()));
  // The ordinary tags mp4mux stores: the title is the first line ("…": cut), the comment all of it.
  EXPECT_EQ(exif(s.mp4, "ItemList:Title"), "a red <circle> & a \"square\"\xE2\x80\xA6");
  EXPECT_EQ(exif(s.mp4, "ItemList:Comment"), prompt);
  EXPECT_EQ(exif(s.mp4, "ItemList:Encoder"), "gst-h3");
}

TEST(H3Marking, TheReplayOfAStreamWithTwoPromptChangesGivesTheSameFramesAndSoundtrack) {
  h3::test::TempDir dir("marking");
  const std::string timeline = dir.str() + "/timeline.txt";
  std::ofstream(timeline) << "0.75 " << kSecond << "\n";
  // Chunk 2 by the timeline; the live change for 85/24 s (chunk 5) comes once the pipeline
  // prerolled, and lands on chunk 5 or, had the engine begun it already, a later one: the record
  // says where.
  const Stream s =
      make_stream(dir.str(), "sampler=causal num-frames=124 seed=11 steps=2 prompt-timeline=" + timeline,
                  kFirst, true, kThird, 85.0 / 24);
  ASSERT_TRUE(s.result.eos) << s.result.message << " " << s.result.debug;
  ASSERT_EQ(s.applied.size(), 2u);
  EXPECT_EQ(s.applied[0].first, 2);
  EXPECT_GE(s.applied[1].first, 5);
  // The prompt track: one sample per 17-frame chunk, at its first frame's time, with its prompt.
  const auto track = text_track(s.mp4);
  ASSERT_EQ(track.size(), 8u);  // 124 frames: 7 whole chunks and 5 frames
  for (size_t k = 0; k < track.size(); ++k) {
    // The track's times are in milliseconds (mp4mux's text trak timescale).
    EXPECT_NEAR(static_cast<double>(track[k].first),
                static_cast<double>(gst_util_uint64_scale(k * 17, GST_SECOND, 24)), 0.5e6)
        << "sample " << k;
    const char* want = static_cast<gint64>(k) >= s.applied[1].first ? kThird : k >= 2 ? kSecond : kFirst;
    EXPECT_EQ(track[k].second, want) << "sample " << k;
  }
  EXPECT_NEAR(static_cast<double>(track[2].first), static_cast<double>(s.applied[0].second), 0.5e6);
  EXPECT_NEAR(static_cast<double>(track[static_cast<size_t>(s.applied[1].first)].first),
              static_cast<double>(s.applied[1].second), 0.5e6);

  const Ran r = replay(s.mp4, dir.str());
  ASSERT_TRUE(r.ok) << r.err;
  const std::string video = slurp(s.video), audio = slurp(s.audio);
  EXPECT_EQ(video.size(), 124u * 80 * 48 * 3);
  EXPECT_GT(audio.size(), 0u);
  EXPECT_TRUE(slurp(dir.str() + "/replay.rgb") == video) << "the replayed frames differ";
  EXPECT_TRUE(slurp(dir.str() + "/replay.f32") == audio) << "the replayed soundtrack differs";
}

TEST(H3Marking, ReplayRefusesAFileWithoutTheMarkingATamperedTrackOrRecordAndOtherWeights) {
  h3::test::TempDir dir("marking");
  const std::string timeline = dir.str() + "/timeline.txt";
  std::ofstream(timeline) << "0.75 " << kSecond << "\n";
  const std::string props = "sampler=causal num-frames=56 seed=5 steps=2 prompt-timeline=" + timeline;
  {
    // Straight from mp4mux: its own XMP packet holds no h3 record.
    const Stream s = make_stream(dir.str(), props, kFirst, /*mark=*/false);
    ASSERT_TRUE(s.result.eos) << s.result.message;
    const Ran r = replay(s.mp4, dir.str());
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.err,
              "h3 replay: not found: " + s.mp4 +
                  " carries no h3 marking (no XMP packet with an h3:Record): it was not written through "
                  "h3mark, or its marking was removed\n");
  }
  const Stream s = make_stream(dir.str(), props, kFirst);
  ASSERT_TRUE(s.result.eos) << s.result.message;
  const std::string file = slurp(s.mp4);
  const auto write = [&](const std::string& name, std::string bytes) {
    const std::string path = dir.str() + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  };
  {
    // The second chunk's tx3g sample (the first prompt, chunk 1) made to say something else.
    std::string bytes = file;
    const std::string from = std::string(kFirst), to = std::string(kFirst).replace(2, 3, "RED");
    size_t at = bytes.find(from);
    at = bytes.find(from, at + 1);  // the second sample; the first, chunk 0's, stays
    ASSERT_NE(at, std::string::npos);
    bytes.replace(at, from.size(), to);
    const std::string path = write("tampered-track.mp4", bytes);
    const Ran r = replay(path, dir.str());
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.err,
              "h3 replay: mismatch: " + path +
                  "'s prompt track sample 2 (chunk 1, 0.708 s) reads 'a RED circle moving right on a black "
                  "background' where the h3 record has 'a red circle moving right on a black background': "
                  "the track or the record was altered; refusing to replay\n");
  }
  {
    // The record's seed field renamed (the JSON is escaped in the XMP): a field is missing.
    std::string bytes = file;
    const std::string from = "&quot;seed&quot;:", to = "&quot;sEed&quot;:";
    const size_t at = bytes.find(from);
    ASSERT_NE(at, std::string::npos);
    bytes.replace(at, from.size(), to);
    const std::string path = write("no-seed.mp4", bytes);
    const Ran r = replay(path, dir.str());
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.err, "h3 replay: format error: " + path + ": the h3 record has no field 'seed'\n");
  }
  {
    // The same model with one weight file changed: other weights.
    const std::string copy = dir.str() + "/model";
    ASSERT_TRUE(spawn({"cp", "-r", model_dir(), copy}).ok);
    ASSERT_TRUE(spawn({"bash", "-c",
                       "f=$(find '" + copy +
                           "' -name '*.safetensors' | sort | head -1); "
                           "printf 'x' | dd of=\"$f\" bs=1 seek=$(($(stat -c %s \"$f\") - 1)) conv=notrunc "
                           "status=none"})
                    .ok);
    const Ran r = replay(s.mp4, dir.str(), copy);
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.err.rfind("h3 replay: mismatch: " + s.mp4 + " was made by model '", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(copy + " hashes to "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(": not the same weights. Pass --model with the folder that made it"),
              std::string::npos)
        << r.err;
  }
}

TEST(H3Marking, H3markWithoutAnH3StreamWarnsAndLeavesTheFileAsTheMuxerWroteIt) {
  h3::test::TempDir dir("marking");
  const std::string out = dir.str() + "/test.mp4";
  GstElement* p = gst_parse_launch(
      ("videotestsrc num-buffers=5 ! x264enc ! mp4mux ! h3mark ! filesink location=" + out).c_str(), nullptr);
  const h3test::RunResult r = h3test::run_to_end(p, 60);
  gst_object_unref(p);
  EXPECT_TRUE(r.eos);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0], "No h3 stream reached the muxer: the file is left unmarked");
  EXPECT_EQ(exif(out, "XMP-iptcExt:DigitalSourceType"), "");
  EXPECT_TRUE(spawn({"ffprobe", "-v", "error", out}).ok);
}

}  // namespace
