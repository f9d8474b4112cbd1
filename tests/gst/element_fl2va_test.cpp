// h3videosrc's pictures (docs/element.md): first-frame and last-frame (FL2VA) and references
// (Ref2VA), decoded by GStreamer from a file or a URI; FL2VA's canvas following the first one's
// aspect ratio, Ref2VA's staying the model's; and the errors of a missing file, of a file with no
// picture, of a model without the condition path and of mixing the two tasks — each naming the
// property and the file.
#include <glib/gstdio.h>
#include <gst/app/gstappsink.h>
#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <gst/video/video.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "gst_test_util.h"
#include "picture_bombs.h"
#include "pictures/picture_file.h"

namespace {

std::unique_ptr<h3::test::TempDir> g_scratch;  // the suite's folder: the model and the pictures
std::string g_dir;                             // its path
std::string g_model;  // `h3 make-tiny --conditioning`: a tiny model with FL2VA's condition path

class H3VideoSrcFl2va : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_scratch = std::make_unique<h3::test::TempDir>("gst-fl2va");
    g_dir = g_scratch->str();
    g_model = g_dir + "/model";
    gchar* argv[] = {const_cast<gchar*>(H3_BIN),
                     const_cast<gchar*>("make-tiny"),
                     const_cast<gchar*>("--conditioning"),
                     const_cast<gchar*>("--quiet"),
                     const_cast<gchar*>("--out"),
                     const_cast<gchar*>(g_model.c_str()),
                     nullptr};
    gint status = -1;
    GError* err = nullptr;
    ASSERT_TRUE(g_spawn_sync(nullptr, argv, nullptr, G_SPAWN_DEFAULT, nullptr, nullptr, nullptr, nullptr,
                             &status, &err));
    ASSERT_TRUE(g_spawn_check_wait_status(status, nullptr)) << "h3 make-tiny --conditioning failed";
    // Pictures written by GStreamer itself: a 4:3 PNG and a 2:3 JPEG.
    write_picture("videotestsrc pattern=smpte num-buffers=1 ! video/x-raw,width=320,height=240 ! pngenc",
                  "first.png");
    write_picture("videotestsrc pattern=ball num-buffers=1 ! video/x-raw,width=200,height=300 ! jpegenc",
                  "last.jpg");
    // A video (30 frames at 30 fps, 96 x 64) and one with a soundtrack, written by GStreamer.
    write_picture(
        "videotestsrc pattern=ball num-buffers=30 ! video/x-raw,width=96,height=64,framerate=30/1 ! jpegenc "
        "! "
        "avimux",
        "clip.avi");
    write_picture(
        "audiotestsrc num-buffers=20 ! audio/x-raw,rate=8000,channels=1,format=S16LE ! mux. videotestsrc "
        "num-buffers=30 ! video/x-raw,width=96,height=64,framerate=30/1 ! jpegenc ! avimux name=mux",
        "sound.avi");
    write_picture("audiotestsrc num-buffers=10 ! audio/x-raw,rate=48000,channels=2,format=F32LE ! wavenc",
                  "voice.wav");
    // The same JPEG twice, the second with an EXIF orientation of 6 (shown turned 90 degrees clockwise).
    write_picture(
        "videotestsrc pattern=smpte num-buffers=1 ! video/x-raw,width=64,height=32 ! jpegenc ! jifmux",
        "upright.jpg");
    write_picture(
        "videotestsrc pattern=smpte num-buffers=1 ! video/x-raw,width=64,height=32 ! jpegenc ! "
        "taginject tags=\"image-orientation=rotate-90\" ! jifmux",
        "turned.jpg");
    // A PNG and a lossless WebP of the same picture, then each again with an EXIF block in its own
    // chunk: a PNG's eXIf (orientation 6, turned 90 degrees clockwise) and, in an extended WebP, an
    // EXIF chunk (orientation 8, turned 90 degrees anticlockwise; and 1, upright).
    write_picture("videotestsrc pattern=smpte num-buffers=1 ! video/x-raw,width=64,height=32 ! pngenc",
                  "upright.png");
    write_picture(
        "videotestsrc pattern=smpte num-buffers=1 ! video/x-raw,width=64,height=32 ! webpenc lossless=true",
        "upright.webp");
    write_bytes("turned.png", png_with_exif(read_bytes("upright.png"), exif_orientation(6)));
    write_bytes("turned.webp", webp_with_exif(read_bytes("upright.webp"), exif_orientation(8), 64, 32));
    write_bytes("level.webp", webp_with_exif(read_bytes("upright.webp"), exif_orientation(1), 64, 32));
    std::ofstream(g_dir + "/notes.png") << "these are notes, not a picture\n";
  }
  static std::string read_bytes(const char* name) {
    std::ifstream in(g_dir + "/" + name, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static void write_bytes(const char* name, const std::string& bytes) {
    std::ofstream(g_dir + "/" + name, std::ios::binary) << bytes;
  }
  // A big-endian TIFF block with one IFD entry: Orientation (0x0112), a SHORT.
  static std::string exif_orientation(int orientation) {
    const char tiff[] = {'M',  'M',  0, 42, 0, 0, 0, 8,  // header, IFD at 8
                         0,    1,                        // one entry
                         0x01, 0x12, 0, 3,  0, 0, 0, 1, 0, static_cast<char>(orientation),
                         0,    0,    0, 0,  0, 0};  // no next IFD
    return std::string(tiff, sizeof tiff);
  }
  static std::string be32(uint32_t v) {
    return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
            static_cast<char>(v)};
  }
  static std::string le32(uint32_t v) {
    return {static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16),
            static_cast<char>(v >> 24)};
  }
  // PNG's CRC-32 (ISO 3309) over a chunk's type and data.
  static uint32_t crc32(const std::string& bytes) {
    uint32_t c = 0xffffffffu;
    for (unsigned char b : bytes) {
      c ^= b;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
  }
  // The eXIf chunk right after IHDR (8 bytes of signature, then IHDR's 8 + 13 + 4).
  static std::string png_with_exif(const std::string& png, const std::string& exif) {
    const std::string body = "eXIf" + exif;
    return png.substr(0, 33) + be32(static_cast<uint32_t>(exif.size())) + body + be32(crc32(body)) +
           png.substr(33);
  }
  // A simple WebP (RIFF, WEBP, one image chunk) made extended: a VP8X chunk saying that an EXIF
  // chunk follows, the image chunk, the EXIF chunk.
  static std::string webp_with_exif(const std::string& webp, const std::string& exif, int width, int height) {
    std::string vp8x = std::string("VP8X") + le32(10) + std::string(1, '\x08') + std::string(3, '\0');
    vp8x += le32(static_cast<uint32_t>(width - 1)).substr(0, 3) +
            le32(static_cast<uint32_t>(height - 1)).substr(0, 3);
    std::string chunk = "EXIF" + le32(static_cast<uint32_t>(exif.size())) + exif;
    if (exif.size() % 2) chunk += '\0';
    const std::string body = "WEBP" + vp8x + webp.substr(12) + chunk;
    return "RIFF" + le32(static_cast<uint32_t>(body.size())) + body;
  }
  static void TearDownTestSuite() { g_scratch.reset(); }
  static void write_picture(const std::string& source, const char* name) {
    const std::string l = source + " ! filesink location=" + g_dir + "/" + name;
    GstElement* p = gst_parse_launch(l.c_str(), nullptr);
    ASSERT_NE(p, nullptr);
    const h3test::RunResult r = h3test::run_to_end(p, 60);
    gst_object_unref(p);
    ASSERT_TRUE(r.eos) << r.message;
  }
};

// A picture written losslessly by GStreamer from known bytes (appsrc ! pngenc) is read back
// byte for byte, whatever the row stride the decoder pads to (97 * 3 bytes is not a multiple of 4).
TEST_F(H3VideoSrcFl2va, APngIsReadBackByteForByteWhateverItsStride) {
  const int w = 97, h = 71;
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>((i * 131 + i / 291 * 7) % 256);
  const std::string path = g_dir + "/odd.png";
  const std::string l =
      "appsrc name=src caps=video/x-raw,format=RGB,width=97,height=71,framerate=1/1 ! pngenc ! "
      "filesink location=" +
      path;
  GstElement* p = gst_parse_launch(l.c_str(), nullptr);
  ASSERT_NE(p, nullptr);
  GstElement* src = h3test::by_name(p, "src");
  // appsrc's buffer must carry GStreamer's own stride for RGB (rows padded to 4 bytes).
  GstVideoInfo info;
  gst_video_info_set_format(&info, GST_VIDEO_FORMAT_RGB, w, h);
  GstBuffer* buf = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&info), nullptr);
  GstMapInfo map;
  gst_buffer_map(buf, &map, GST_MAP_WRITE);
  for (int y = 0; y < h; ++y) {
    std::copy_n(rgb.data() + static_cast<size_t>(y) * w * 3, w * 3,
                map.data + y * GST_VIDEO_INFO_PLANE_STRIDE(&info, 0));
  }
  gst_buffer_unmap(buf, &map);
  ASSERT_NE(gst_element_set_state(p, GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  ASSERT_EQ(gst_app_src_push_buffer(GST_APP_SRC(src), buf), GST_FLOW_OK);
  gst_app_src_end_of_stream(GST_APP_SRC(src));
  gst_object_unref(src);
  const h3test::RunResult r = h3test::wait_for_end(gst_element_get_bus(p), 60);
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(p);
  ASSERT_TRUE(r.eos) << r.message;
  const h3::Picture pic = h3::pictures::read_picture(path, "first-frame");
  EXPECT_EQ(pic.width, w);
  EXPECT_EQ(pic.height, h);
  EXPECT_EQ(pic.source, path);
  EXPECT_TRUE(pic.rgb == rgb);
}

// Plays `p` (its appsink named "sink") to its end: the frames it received, their size and a digest
// of their bytes (FNV-1a).
struct Pulled {
  int frames = 0, width = 0, height = 0;
  bool eos = false;
  uint64_t digest = 1469598103934665603ull;
};
Pulled play_to_end(GstElement* p) {
  GstElement* sink = h3test::by_name(p, "sink");
  Pulled out;
  EXPECT_NE(gst_element_set_state(p, GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  while (GstSample* s = gst_app_sink_try_pull_sample(GST_APP_SINK(sink), 120 * GST_SECOND)) {
    const GstStructure* st = gst_caps_get_structure(gst_sample_get_caps(s), 0);
    gst_structure_get_int(st, "width", &out.width);
    gst_structure_get_int(st, "height", &out.height);
    ++out.frames;
    GstMapInfo map;
    if (gst_buffer_map(gst_sample_get_buffer(s), &map, GST_MAP_READ)) {
      for (gsize i = 0; i < map.size; ++i) out.digest = (out.digest ^ map.data[i]) * 1099511628211ull;
      gst_buffer_unmap(gst_sample_get_buffer(s), &map);
    }
    gst_sample_unref(s);
  }
  out.eos = gst_app_sink_is_eos(GST_APP_SINK(sink));
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(sink);
  return out;
}

// h3videosrc making 22 frames from the tests' folder's files `references` (in order), played to its end.
Pulled play_references(const std::vector<std::string>& references) {
  std::string list;
  for (const std::string& r : references) list += (list.empty() ? "" : ",") + g_dir + "/" + r;
  const std::string l = "h3videosrc num-frames=22 steps=3 model=" + g_model + " references=\"<" + list +
                        ">\" ! appsink name=sink sync=false max-buffers=0";
  GstElement* p = gst_parse_launch(l.c_str(), nullptr);
  EXPECT_NE(p, nullptr);
  if (!p) return {};
  const Pulled got = play_to_end(p);
  gst_object_unref(p);
  return got;
}

h3test::RunResult run(const std::string& props) {
  const std::string l = "h3videosrc num-frames=22 steps=3 " + props + " ! fakesink";
  GstElement* p = gst_parse_launch(l.c_str(), nullptr);
  EXPECT_NE(p, nullptr);
  h3test::RunResult r = h3test::run_to_end(p, 300);
  gst_object_unref(p);
  return r;
}

TEST_F(H3VideoSrcFl2va, TheClipIsMadeOnTheCanvasOfTheFirstFramesAspect) {
  const std::string l = "h3videosrc name=src num-frames=22 steps=3 model=" + g_model +
                        " first-frame=" + g_dir + "/first.png last-frame=file://" + g_dir +
                        "/last.jpg ! appsink name=sink sync=false max-buffers=0";
  GstElement* p = gst_parse_launch(l.c_str(), nullptr);
  ASSERT_NE(p, nullptr);
  GstElement* src = h3test::by_name(p, "src");
  gchar* first = nullptr;
  g_object_get(src, "first-frame", &first, nullptr);
  EXPECT_EQ(std::string(first), g_dir + "/first.png");
  g_free(first);
  gst_object_unref(src);
  const Pulled got = play_to_end(p);
  gst_object_unref(p);
  EXPECT_TRUE(got.eos);
  EXPECT_EQ(got.frames, 22);
  // 4:3 on the tiny model's canvas (short edge 160, area 256 x 160): 224 x 160.
  EXPECT_EQ(got.width, 224);
  EXPECT_EQ(got.height, 160);
}

TEST_F(H3VideoSrcFl2va, AMissingPictureIsResourceNotFoundNamingThePropertyAndFile) {
  const h3test::RunResult r = run("model=" + g_model + " first-frame=" + g_dir + "/absent.png");
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.domain, GST_RESOURCE_ERROR);
  EXPECT_EQ(r.code, GST_RESOURCE_ERROR_NOT_FOUND);
  EXPECT_NE(r.message.find("first-frame '" + g_dir + "/absent.png': no such file"), std::string::npos)
      << r.message;
}

TEST_F(H3VideoSrcFl2va, AFileWithoutAPictureIsAnErrorNamingIt) {
  const h3test::RunResult r = run("model=" + g_model + " last-frame=" + g_dir + "/notes.png");
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.domain, GST_RESOURCE_ERROR);
  EXPECT_EQ(r.code, GST_RESOURCE_ERROR_OPEN_READ);
  EXPECT_NE(r.message.find("last-frame '" + g_dir + "/notes.png': GStreamer could not decode"),
            std::string::npos)
      << r.message;
}

TEST_F(H3VideoSrcFl2va, AModelWithoutTheConditionPathIsRefusedSayingWhy) {
  // The tests' tiny model (H3_MODEL_DIR) is T2VA only: its VAE has no encoder.
  const h3test::RunResult r = run("first-frame=" + g_dir + "/first.png");
  ASSERT_TRUE(r.error);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.message.find("first-frame asks for FL2VA"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("encoder.conv_in.weight"), std::string::npos) << r.message;
}

// The attack run's PNG bomb (16384 x 16384 in 1.1 MB here, 0.78 MB in the attack; as first-frame it peaked
// at 1.87 GB in h3videosrc, 1.54 GB in h3src) is refused from its header, naming its size, before any decoder
// allocates a frame (GStreamer's allocations in this process counted).
TEST_F(H3VideoSrcFl2va, APictureBombIsRefusedFromItsHeaderNamingItsSize) {
  h3test::count_gst_allocations();
  const std::string bomb = g_dir + "/bomb.png";
  h3test::write_file(bomb, h3test::black_png(16384, 16384));
  const std::string refused =
      "first-frame '" + bomb +
      "' is 16384x16384 (268 MP): each side must be 16 to 16384 pixels, and at most 67 MP "
      "(8192 x 8192) in all; scale or crop it";
  h3test::reset_gst_allocations();
  h3test::reset_peak_rss();
  const int64_t before = h3test::peak_rss_kib();  // the engine of the tests before is loaded
  const h3test::RunResult r = run("model=" + g_model + " first-frame=" + bomb);
  std::printf(
      "h3videosrc first-frame=bomb.png: largest GStreamer allocation %llu bytes, peak RSS %lld KiB "
      "(%lld KiB before)\n",
      static_cast<unsigned long long>(h3test::largest_gst_allocation()),
      static_cast<long long>(h3test::peak_rss_kib()), static_cast<long long>(before));
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.domain, GST_RESOURCE_ERROR);
  EXPECT_EQ(r.code, GST_RESOURCE_ERROR_OPEN_READ);
  EXPECT_EQ(r.message, refused);
  EXPECT_LT(h3test::largest_gst_allocation(), 16384ull * 16384ull);
  // h3src reads its pictures the same way.
  h3test::reset_gst_allocations();
  const std::string l = "h3src name=s num-frames=22 steps=3 model=" + g_model + " first-frame=" + bomb +
                        " s.video ! fakesink s.audio ! fakesink";
  GstElement* p = gst_parse_launch(l.c_str(), nullptr);
  ASSERT_NE(p, nullptr);
  const h3test::RunResult av = h3test::run_to_end(p, 300);
  gst_object_unref(p);
  ASSERT_TRUE(av.error);
  EXPECT_EQ(av.message, refused);
  EXPECT_LT(h3test::largest_gst_allocation(), 16384ull * 16384ull);
}

// A model without FL2VA's condition path refuses before the picture is decoded: the bomb gets the
// model's refusal, not its size's, and an ordinary picture is not decoded either.
TEST_F(H3VideoSrcFl2va, AModelWithoutTheConditionPathRefusesBeforeDecodingThePicture) {
  h3test::count_gst_allocations();
  const std::string bomb = g_dir + "/bomb-t2va.png";
  h3test::write_file(bomb, h3test::black_png(16384, 16384));
  for (const std::string& picture : {bomb, g_dir + "/first.png"}) {
    h3test::reset_gst_allocations();
    const h3test::RunResult r = run("first-frame=" + picture);  // H3_MODEL_DIR: the T2VA tiny model
    ASSERT_TRUE(r.error) << picture;
    EXPECT_EQ(r.domain, GST_RESOURCE_ERROR);
    EXPECT_EQ(r.code, GST_RESOURCE_ERROR_SETTINGS);
    EXPECT_EQ(
        r.message.rfind("The requested clip is not possible: first-frame asks for FL2VA (image to video), "
                        "which this model cannot do: ",
                        0),
        0u)
        << r.message;
    EXPECT_NE(r.message.find("encoder.conv_in.weight"), std::string::npos) << r.message;
    // first.png is 320 x 240: not even its frame was allocated.
    EXPECT_LT(h3test::largest_gst_allocation(), 320u * 240u) << picture;
  }
}

TEST_F(H3VideoSrcFl2va, TheCausalSamplerIsRefusedWithKeyframes) {
  const h3test::RunResult r = run("model=" + g_model + " sampler=causal first-frame=" + g_dir + "/first.png");
  ASSERT_TRUE(r.error);
  EXPECT_NE(r.message.find("euler sampler only"), std::string::npos) << r.message;
}

// references="<...>" as gst-launch writes it: a file and a URI, read back in order; the clip is made
// on the model's canvas (references never set it) by its Ref2VA DiT.
TEST_F(H3VideoSrcFl2va, ReferencesAreAnArrayOfFilesOrUrisAndTheCanvasStaysTheModels) {
  const std::string l = "h3videosrc name=src num-frames=22 steps=3 model=" + g_model + " references=\"<" +
                        g_dir + "/first.png,file://" + g_dir +
                        "/last.jpg>\" ! appsink name=sink sync=false max-buffers=0";
  GstElement* p = gst_parse_launch(l.c_str(), nullptr);
  ASSERT_NE(p, nullptr);
  GstElement* src = h3test::by_name(p, "src");
  GValue refs = G_VALUE_INIT;
  g_value_init(&refs, GST_TYPE_ARRAY);
  g_object_get_property(G_OBJECT(src), "references", &refs);
  ASSERT_EQ(gst_value_array_get_size(&refs), 2u);
  EXPECT_STREQ(g_value_get_string(gst_value_array_get_value(&refs, 0)), (g_dir + "/first.png").c_str());
  EXPECT_STREQ(g_value_get_string(gst_value_array_get_value(&refs, 1)),
               ("file://" + g_dir + "/last.jpg").c_str());
  g_value_unset(&refs);
  gst_object_unref(src);
  const Pulled got = play_to_end(p);
  gst_object_unref(p);
  EXPECT_TRUE(got.eos);
  EXPECT_EQ(got.frames, 22);
  EXPECT_EQ(got.width, 256);  // the tiny model's default canvas
  EXPECT_EQ(got.height, 160);
}

// A video reference is decoded only as far as the clip can use it: num-frames' generated frames,
// or the model's default length when num-frames is left to the model (the engine module's
// check_task says it). A file whose header says 10 s but whose frames stop near 5 s serves the
// default clip (48 frames: 2.7 s read) and is refused as truncated for 200 frames (9.0 s read).
TEST_F(H3VideoSrcFl2va, AVideoReferenceIsReadForTheClipsLengthTheModelsWhenNumFramesIsLeftToIt) {
  write_picture(
      "videotestsrc pattern=ball num-buffers=240 ! video/x-raw,width=96,height=64,framerate=24/1 ! jpegenc ! "
      "matroskamux",
      "long.mkv");
  const std::string mkv = read_bytes("long.mkv");
  write_bytes("halved.mkv", mkv.substr(0, mkv.size() / 2));
  const std::string refs = " references=\"<" + g_dir + "/halved.mkv>\"";
  GstElement* p = gst_parse_launch(
      ("h3videosrc steps=3 model=" + g_model + refs + " ! appsink name=sink sync=false max-buffers=0")
          .c_str(),
      nullptr);
  ASSERT_NE(p, nullptr);
  const Pulled got = play_to_end(p);
  gst_object_unref(p);
  EXPECT_TRUE(got.eos);
  EXPECT_EQ(got.frames, 48);  // the conditioning model's default length
  const h3test::RunResult r = run("num-frames=200 model=" + g_model + refs);  // the later num-frames wins
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.domain, GST_RESOURCE_ERROR);
  EXPECT_EQ(r.code, GST_RESOURCE_ERROR_OPEN_READ);
  EXPECT_NE(r.message.find("references: reference 1 '" + g_dir + "/halved.mkv': its video ends after "),
            std::string::npos)
      << r.message;
  EXPECT_NE(r.message.find(" s, but the file says it lasts 10.000 s: it is truncated or damaged"),
            std::string::npos)
      << r.message;
}

TEST_F(H3VideoSrcFl2va, AMissingReferenceIsResourceNotFoundNamingItsPlace) {
  const h3test::RunResult r =
      run("model=" + g_model + " references=\"<" + g_dir + "/first.png," + g_dir + "/absent.png>\"");
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.domain, GST_RESOURCE_ERROR);
  EXPECT_EQ(r.code, GST_RESOURCE_ERROR_NOT_FOUND);
  EXPECT_NE(r.message.find("references: reference 2 '" + g_dir + "/absent.png': no such file"),
            std::string::npos)
      << r.message;
}

TEST_F(H3VideoSrcFl2va, ReferencesAreRefusedBesideKeyframesAndOnAModelWithoutRef2vasDit) {
  const h3test::RunResult both = run("model=" + g_model + " first-frame=" + g_dir +
                                     "/first.png references=\"<" + g_dir + "/last.jpg>\"");
  ASSERT_TRUE(both.error);
  EXPECT_NE(both.message.find("are different tasks of different checkpoints"), std::string::npos)
      << both.message;
  // The tests' tiny model (H3_MODEL_DIR) has no transformer_ref/.
  const h3test::RunResult t2va = run("references=\"<" + g_dir + "/first.png>\"");
  ASSERT_TRUE(t2va.error);
  EXPECT_FALSE(t2va.timed_out);
  EXPECT_NE(t2va.message.find("has no Ref2VA DiT"), std::string::npos) << t2va.message;
}

// A reference is an image when GStreamer decodes one picture from it, a video otherwise: its
// frames up to the clip's duration, its frame rate, and whether it has a soundtrack.
TEST_F(H3VideoSrcFl2va, AReferenceIsAnImageOrAVideoWithItsRateAndFrames) {
  const h3::Reference image = h3::pictures::read_reference(g_dir + "/first.png", "reference 1", 10.0);
  EXPECT_FALSE(image.is_video());
  EXPECT_EQ(image.image.width, 320);
  EXPECT_EQ(image.image.height, 240);
  const h3::Reference video = h3::pictures::read_reference(g_dir + "/clip.avi", "reference 2", 10.0);
  ASSERT_TRUE(video.is_video());
  EXPECT_EQ(video.video.frames.size(), 30u);
  EXPECT_EQ(video.video.width, 96);
  EXPECT_EQ(video.video.height, 64);
  EXPECT_EQ(video.video.fps_n, 30);
  EXPECT_EQ(video.video.fps_d, 1);
  EXPECT_EQ(video.video.frames[0].size(), 96u * 64 * 3);
  EXPECT_TRUE(video.video.soundtrack.empty());
  // Frames past the clip's duration are not read: 0.5 s at 30 fps.
  EXPECT_EQ(h3::pictures::read_reference(g_dir + "/clip.avi", "reference 2", 0.5).video.frames.size(), 15u);
  // A soundtrack is decoded at its own rate and channels (20 buffers of 1024 samples of a 0.8
  // sine at 8 kHz, mono), up to the clip's duration (one sample past it).
  const h3::Reference sound = h3::pictures::read_reference(g_dir + "/sound.avi", "reference 3", 10.0);
  ASSERT_TRUE(sound.is_video());
  const h3::Audio& track = sound.video.soundtrack;
  EXPECT_EQ(track.rate, 8000);
  EXPECT_EQ(track.channels, 1);
  EXPECT_EQ(track.frames(), 20 * 1024);
  EXPECT_NEAR(*std::max_element(track.samples.begin(), track.samples.end()), 0.8, 1e-3);
  EXPECT_EQ(sound.sound(), &sound.video.soundtrack);
  EXPECT_EQ(h3::pictures::read_reference(g_dir + "/sound.avi", "reference 3", 1.0).video.soundtrack.frames(),
            8001);
  // A file of sound alone is an audio reference.
  const h3::Reference voice = h3::pictures::read_reference(g_dir + "/voice.wav", "reference 4", 10.0);
  ASSERT_TRUE(voice.is_audio());
  EXPECT_EQ(voice.audio.rate, 48000);
  EXPECT_EQ(voice.audio.channels, 2);
  EXPECT_EQ(voice.audio.frames(), 10 * 1024);
  EXPECT_EQ(voice.audio.source, g_dir + "/voice.wav");
}

// A video reference through the element: the clip on the model's canvas.
TEST_F(H3VideoSrcFl2va, AVideoReferenceConditionsTheClip) {
  const Pulled got = play_references({"clip.avi", "first.png"});
  EXPECT_TRUE(got.eos);
  EXPECT_EQ(got.frames, 22);
  EXPECT_EQ(got.width, 256);
}

// The largest difference between `turned` (32 x 64) and the 64 x 32 picture `up` turned a quarter
// clockwise or anticlockwise.
int worst_against_quarter_turn(const h3::Picture& up, const h3::Picture& turned, bool clockwise) {
  EXPECT_EQ(up.width, 64);
  EXPECT_EQ(up.height, 32);
  EXPECT_EQ(turned.width, 32);
  EXPECT_EQ(turned.height, 64);
  if (up.width != 64 || up.height != 32 || turned.width != 32 || turned.height != 64) return 255;
  int worst = 0;
  for (int r = 0; r < 64; ++r) {
    for (int c = 0; c < 32; ++c) {
      for (int k = 0; k < 3; ++k) {
        // Clockwise, row r and column c show the upright picture's row 31 - c, column r;
        // anticlockwise, its row c, column 63 - r.
        const int a = turned.rgb[(static_cast<size_t>(r) * 32 + c) * 3 + k];
        const int b = clockwise ? up.rgb[(static_cast<size_t>(31 - c) * 64 + r) * 3 + k]
                                : up.rgb[(static_cast<size_t>(c) * 64 + (63 - r)) * 3 + k];
        worst = std::max(worst, std::abs(a - b));
      }
    }
  }
  return worst;
}

// A JPEG's EXIF orientation is applied, as the reference pipelines' load_image (Pillow's
// exif_transpose) applies it: orientation 6 is the stored picture turned 90 degrees clockwise.
TEST_F(H3VideoSrcFl2va, AJpegIsTurnedUprightByItsExifOrientation) {
  const h3::Picture up = h3::pictures::read_picture(g_dir + "/upright.jpg", "first-frame");
  const h3::Picture turned = h3::pictures::read_picture(g_dir + "/turned.jpg", "first-frame");
  EXPECT_EQ(worst_against_quarter_turn(up, turned, true), 0);
}

// So are a PNG's (its eXIf chunk) and a WebP's (its EXIF chunk), which pngdec and webpdec do not
// report: orientation 6 clockwise, 8 anticlockwise, 1 as stored; pixel for pixel, both lossless.
TEST_F(H3VideoSrcFl2va, APngAndAWebpAreTurnedUprightByTheirExifOrientation) {
  const h3::Picture png = h3::pictures::read_picture(g_dir + "/upright.png", "first-frame");
  const h3::Picture turned_png = h3::pictures::read_picture(g_dir + "/turned.png", "first-frame");
  EXPECT_EQ(worst_against_quarter_turn(png, turned_png, true), 0);
  const h3::Picture webp = h3::pictures::read_picture(g_dir + "/upright.webp", "first-frame");
  const h3::Picture turned_webp =
      h3::pictures::read_picture("file://" + g_dir + "/turned.webp", "first-frame");
  EXPECT_EQ(worst_against_quarter_turn(webp, turned_webp, false), 0);
  const h3::Picture level = h3::pictures::read_picture(g_dir + "/level.webp", "first-frame");
  EXPECT_EQ(level.width, 64);
  EXPECT_EQ(level.rgb, webp.rgb);
}

// Sound through the element: a video with its soundtrack, a picture and a WAV of sound alone; and
// sound alone refused, naming why.
TEST_F(H3VideoSrcFl2va, SoundReferencesConditionTheClipAndSoundAloneIsRefused) {
  const Pulled voiced = play_references({"sound.avi", "first.png", "voice.wav"});
  EXPECT_TRUE(voiced.eos);
  EXPECT_EQ(voiced.frames, 22);
  // The sound is conditioned on: without the WAV the same pictures give other frames.
  const Pulled silent = play_references({"sound.avi", "first.png"});
  EXPECT_EQ(silent.frames, 22);
  EXPECT_NE(voiced.digest, silent.digest);
  const h3test::RunResult alone = run("model=" + g_model + " references=\"<" + g_dir + "/voice.wav>\"");
  ASSERT_TRUE(alone.error);
  EXPECT_FALSE(alone.timed_out);
  EXPECT_NE(alone.message.find("an audio reference needs at least one image or video reference beside it"),
            std::string::npos)
      << alone.message;
}

}  // namespace
