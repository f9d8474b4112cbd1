// The picture reader (pictures/picture_file.h) on bad and extreme files: pictures that claim a
// huge size in a small file are refused from their header, before any decoder exists (GStreamer's
// allocations counted: no buffer of a frame's size is made; the peak memory printed); the largest
// pictures the limits take, and one pixel more; empty, truncated and damaged pictures, videos and
// sounds, each refused naming the file.
#include "pictures/picture_file.h"

#include <glib/gstdio.h>
#include <gst/gst.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "../temp_dir.h"
#include "gst_test_util.h"
#include "h3/error.h"
#include "h3/limits.h"
#include "picture_bombs.h"

namespace {

std::unique_ptr<h3::test::TempDir> g_dir;  // a scratch folder for the suite

class PictureFiles : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    gst_init(nullptr, nullptr);
    h3test::count_gst_allocations();
    g_dir = std::make_unique<h3::test::TempDir>("pictures");
  }
  static void TearDownTestSuite() { g_dir.reset(); }
  static std::string path(const char* name) { return *g_dir / name; }
  // Writes what a GStreamer pipeline (ending in an encoder or muxer) makes into `name`.
  static void encode(const std::string& source, const char* name) {
    const std::string l = source + " ! filesink location=" + path(name);
    GstElement* p = gst_parse_launch(l.c_str(), nullptr);
    ASSERT_NE(p, nullptr) << l;
    const h3test::RunResult r = h3test::run_to_end(p, 60);
    gst_object_unref(p);
    ASSERT_TRUE(r.eos) << r.message;
  }
  static std::string read_bytes(const char* name) {
    std::ifstream in(path(name), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static void write_cut(const char* from, const char* to, size_t keep) {
    h3test::write_file(path(to), read_bytes(from).substr(0, keep));
  }
};

// read_picture's h3::Error for `file` (empty when it was read).
std::string picture_refusal(const std::string& file, h3::ErrorKind kind = h3::ErrorKind::kInvalidArgument) {
  try {
    h3::pictures::read_picture(file, "first-frame");
  } catch (const h3::Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  }
  ADD_FAILURE() << file << " was read";
  return {};
}

std::string reference_refusal(const std::string& file, double max_seconds = 5.0) {
  try {
    h3::pictures::read_reference(file, "reference 1", max_seconds);
  } catch (const h3::Error& e) {
    EXPECT_EQ(e.kind(), h3::ErrorKind::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << file << " was read";
  return {};
}

std::string size_refusal(const std::string& name, int w, int h, const std::string& mp) {
  return name + " is " + std::to_string(w) + "x" + std::to_string(h) + mp +
         ": each side must be 16 to 16384 pixels, and at most 67 MP (8192 x 8192) in all; scale or crop it";
}

// The attack run's bombs: a PNG of 16384 x 16384 (inside each side's limit, four times the pixel
// limit; it peaked at 1.87 GB before it was refused) and one of 20000 x 20000 (refused as
// "Internal data stream error", without its size), both under 2 MB; and a JPEG
// whose header claims 30000 x 30000.
TEST_F(PictureFiles, BombsAreRefusedFromTheirHeaderBeforeAnythingIsDecoded) {
  const struct {
    const char* name;
    int w, h;
    const char* mp;
  } bombs[] = {{"bomb-16384.png", 16384, 16384, " (268 MP)"}, {"bomb-20000.png", 20000, 20000, " (400 MP)"}};
  for (const auto& b : bombs) {
    h3test::write_file(path(b.name), h3test::black_png(b.w, b.h));
    std::ifstream in(path(b.name), std::ios::binary | std::ios::ate);
    const auto bytes = static_cast<int64_t>(in.tellg());
    EXPECT_LT(bytes, 2 * 1000 * 1000) << b.name;
    h3test::reset_gst_allocations();
    h3test::reset_peak_rss();
    const int64_t before = h3test::peak_rss_kib();
    EXPECT_EQ(picture_refusal(path(b.name)),
              size_refusal("first-frame '" + path(b.name) + "'", b.w, b.h, b.mp));
    const uint64_t largest = h3test::largest_gst_allocation();
    std::printf(
        "%s (%lld bytes, %d x %d): largest GStreamer allocation %llu bytes, peak RSS %lld KiB (%lld KiB "
        "before)\n",
        b.name, static_cast<long long>(bytes), b.w, b.h, static_cast<unsigned long long>(largest),
        static_cast<long long>(h3test::peak_rss_kib()), static_cast<long long>(before));
    // No decoder allocated a frame: the smallest it could make (8-bit grey) is w x h bytes.
    EXPECT_LT(largest, static_cast<uint64_t>(b.w) * static_cast<uint64_t>(b.h)) << b.name;
  }
  encode("videotestsrc num-buffers=1 ! video/x-raw,width=64,height=48 ! jpegenc", "small.jpg");
  h3test::write_file(path("bomb-30000.jpg"), h3test::jpeg_claiming(read_bytes("small.jpg"), 30000, 30000));
  h3test::reset_gst_allocations();
  EXPECT_EQ(picture_refusal(path("bomb-30000.jpg")),
            size_refusal("first-frame '" + path("bomb-30000.jpg") + "'", 30000, 30000, " (900 MP)"));
  EXPECT_LT(h3test::largest_gst_allocation(), 30000ull * 30000ull);
  // As a reference too: the same refusal, under its own name.
  EXPECT_EQ(reference_refusal(path("bomb-16384.png")),
            size_refusal("reference 1 '" + path("bomb-16384.png") + "'", 16384, 16384, " (268 MP)"));
}

// Each limit at the largest (or smallest) picture it takes, then one pixel beyond: 8192 x 8192
// (the pixel limit, decoded whole: the allocation count sees its frame), 16384 x 16 (the side
// limit), 16 x 16 (the smallest side).
TEST_F(PictureFiles, TheLimitsTakeTheirLargestPictureAndRefuseOnePixelMore) {
  struct Case {
    int w, h;
    bool taken;
  };
  const Case cases[] = {{8192, 8192, true}, {8193, 8192, false}, {8192, 8193, false},
                        {16384, 16, true},  {16, 16384, true},   {16385, 16, false},
                        {16, 16, true},     {15, 16, false},     {16, 15, false}};
  for (const Case& c : cases) {
    const std::string name = "black-" + std::to_string(c.w) + "x" + std::to_string(c.h) + ".png";
    h3test::write_file(path(name.c_str()), h3test::black_png(c.w, c.h));
    h3test::reset_gst_allocations();
    const uint64_t frame = static_cast<uint64_t>(c.w) * static_cast<uint64_t>(c.h);
    if (c.taken) {
      const h3::Picture p = h3::pictures::read_picture(path(name.c_str()), "first-frame");
      EXPECT_EQ(p.width, c.w);
      EXPECT_EQ(p.height, c.h);
      ASSERT_EQ(p.rgb.size(), frame * 3) << name;
      EXPECT_EQ(std::count(p.rgb.begin(), p.rgb.end(), 0), static_cast<std::ptrdiff_t>(frame * 3)) << name;
      EXPECT_GE(h3test::largest_gst_allocation(), frame * 3) << name << ": the decoder's frame was counted";
    } else {
      const std::string mp = frame >= 1000000 ? " (" + std::to_string(frame / 1000000) + " MP)" : "";
      EXPECT_EQ(picture_refusal(path(name.c_str())),
                size_refusal("first-frame '" + path(name.c_str()) + "'", c.w, c.h, mp));
      EXPECT_LT(h3test::largest_gst_allocation(), frame) << name << ": refused before decoding";
    }
  }
  EXPECT_EQ(h3::kMaxPicturePixels, 8192 * 8192);
  EXPECT_EQ(h3::kMinPictureSide, 16);
}

// Empty, truncated and damaged files as keyframes and references: each a refusal naming the file.
TEST_F(PictureFiles, EmptyTruncatedAndDamagedFilesAreRefusedNamingThem) {
  encode("videotestsrc num-buffers=1 ! video/x-raw,width=320,height=240 ! pngenc", "good.png");
  encode(
      "videotestsrc pattern=ball num-buffers=48 ! video/x-raw,width=96,height=64,framerate=24/1 ! jpegenc ! "
      "matroskamux",
      "clip.mkv");
  encode("audiotestsrc num-buffers=40 ! audio/x-raw,rate=48000,channels=2 ! vorbisenc ! oggmux", "voice.ogg");
  // The whole files are read: what follows is about the cuts.
  EXPECT_EQ(h3::pictures::read_picture(path("good.png"), "first-frame").width, 320);
  EXPECT_EQ(h3::pictures::read_reference(path("clip.mkv"), "reference 1", 5.0).video.frames.size(), 48u);
  EXPECT_GT(h3::pictures::read_reference(path("voice.ogg"), "reference 1", 5.0).audio.frames(), 40000);

  for (const char* empty : {"empty.png", "empty.mkv", "empty.wav"}) {
    h3test::write_file(path(empty), "");
    EXPECT_EQ(reference_refusal(path(empty)),
              "reference 1 '" + path(empty) + "': the file is empty (0 bytes)");
  }
  EXPECT_EQ(picture_refusal(path("empty.png")),
            "first-frame '" + path("empty.png") + "': the file is empty (0 bytes)");

  // A PNG cut inside its pixels, and one whose pixel bytes are flipped (their checksum fails).
  const std::string png = read_bytes("good.png");
  write_cut("good.png", "cut.png", png.size() / 2);
  std::string flipped = png;
  for (size_t i = 100; i + 20 < flipped.size(); i += 7) flipped[i] = static_cast<char>(flipped[i] ^ 0x5a);
  h3test::write_file(path("flipped.png"), flipped);
  const std::string decode_failed = "': GStreamer could not decode a picture from it (";
  const std::string give = "); give a picture in a format GStreamer has a decoder for (PNG, JPEG, WebP, ...)";
  for (const char* bad : {"cut.png", "flipped.png"}) {
    const std::string e = picture_refusal(path(bad));
    std::printf("%s: %s\n", bad, e.c_str());
    EXPECT_EQ(e.rfind("first-frame '" + path(bad) + decode_failed, 0), 0u) << e;
    ASSERT_GE(e.size(), give.size()) << e;
    EXPECT_EQ(e.substr(e.size() - give.size()), give) << e;
  }

  // A Matroska video cut at 40 %: its header says 2 s; its frames stop before 1 s.
  const std::string mkv = read_bytes("clip.mkv");
  write_cut("clip.mkv", "cut.mkv", mkv.size() * 2 / 5);
  std::string e = reference_refusal(path("cut.mkv"));
  std::printf("cut.mkv: %s\n", e.c_str());
  const std::string prefix = "reference 1 '" + path("cut.mkv") + "': its video ends after ";
  const std::string suffix =
      " s, but the file says it lasts 2.000 s: it is truncated or damaged; give the whole file";
  ASSERT_EQ(e.rfind(prefix, 0), 0u) << e;
  ASSERT_GT(e.size(), prefix.size() + suffix.size());
  EXPECT_EQ(e.substr(e.size() - suffix.size()), suffix) << e;
  EXPECT_LT(std::stod(e.substr(prefix.size())), 1.0) << e;
  // Cut within the clip's first second, which is all a 1-second request reads: taken.
  EXPECT_EQ(h3::pictures::read_reference(path("cut.mkv"), "reference 1", 0.5).video.frames.size(), 12u);

  // An Ogg sound cut at 40 %: its demuxer cannot find its stream (and it is not read a second
  // time for its sound). Its error is posted while decodebin still sets the demuxer up, and
  // decodebin sometimes keeps it to itself (about 1 run in 60 here): then the reader notices that
  // no data moves and says so, within 10 s instead of the 60 s timeout.
  const std::string ogg = read_bytes("voice.ogg");
  write_cut("voice.ogg", "cut.ogg", ogg.size() * 2 / 5);
  e = reference_refusal(path("cut.ogg"));
  std::printf("cut.ogg: %s\n", e.c_str());
  const std::string demux_failed = "reference 1 '" + path("cut.ogg") + "': GStreamer could not decode it (";
  const std::string give_any = "); give a picture, video or sound in a format GStreamer has a decoder for";
  const std::string stalled =
      "reference 1 '" + path("cut.ogg") +
      "': GStreamer stopped reading it with neither a picture nor an error (a demuxer or "
      "decoder failed without a message): the file is damaged or not something GStreamer "
      "can decode";
  if (e != stalled) {
    EXPECT_EQ(e.rfind(demux_failed, 0), 0u) << e;
    ASSERT_GE(e.size(), give_any.size()) << e;
    EXPECT_EQ(e.substr(e.size() - give_any.size()), give_any) << e;
  }

  // A WAV whose format tag is unknown, and one cut inside its 44-byte header.
  encode("audiotestsrc num-buffers=10 ! audio/x-raw,rate=48000,channels=2,format=S16LE ! wavenc",
         "voice.wav");
  std::string wav = read_bytes("voice.wav");
  wav[20] = 0x34;
  wav[21] = 0x12;
  h3test::write_file(path("unknown.wav"), wav);
  write_cut("voice.wav", "header.wav", 30);
  for (const char* bad : {"unknown.wav", "header.wav"}) {
    e = reference_refusal(path(bad));
    std::printf("%s: %s\n", bad, e.c_str());
    EXPECT_EQ(e.rfind("reference 1 '" + path(bad) + "': GStreamer could not decode it (", 0), 0u) << e;
  }
}

}  // namespace
