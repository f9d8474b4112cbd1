// The frames h3videosrc pushes are exactly the engine's: the element's RGB buffers (visible
// bytes only, whatever the stride) equal h3::Engine::generate's own chunks for the same
// request, on one rank and on two (tensor-parallel DiT); on a canvas wide enough for two VAE
// tiles, two ranks (each decoding one tile, rank 0 gathering) give the one-rank frames; its
// RGBA, BGRx and I420 buffers are the engine's RGB converted independently here (channel order,
// alpha, BT.709 limited-range Y'CbCr); the same seed gives the same frames, another seed other
// frames. h3src's pads are the engine's frames and soundtrack for the same request, byte for
// byte, and its I420 is h3videosrc's.
#include <ATen/ATen.h>
#include <gst/app/gstappsink.h>
#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <gst/video/video.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "gst_test_util.h"
#include "h3/progress.h"
#include "h3/request.h"
#include "vae/chunk_sink.h"

namespace {

// An odd width: GStreamer pads RGB rows to 4 bytes, the engine does not.
constexpr int kW = 50, kH = 40;
constexpr int64_t kN = 9;

struct Clip {
  int width = kW, height = kH;
  int64_t frames = kN;
  uint64_t seed = 5;
  int ranks = 1;
  std::string compute_dtype;  // empty: the property left unset
};

class CollectSink : public h3::ChunkSink {
 public:
  void on_chunk(const h3::Chunk& c) override { chunks.push_back(c.frames.contiguous()); }
  std::vector<at::Tensor> chunks;
};

// The engine opened for the clip's ranks and dtype, and the clip's request (as the elements make it).
std::unique_ptr<h3::Engine> engine_for(const Clip& c) {
  h3::EngineOptions o;
  o.model_dir = h3::default_model_dir();
  o.ranks = c.ranks;
  o.compute_dtype = c.compute_dtype;
  return h3::Engine::open(o);
}
h3::GenerationRequest request_for(const Clip& c) {
  h3::GenerationRequest r;
  r.prompt = "a red kite";
  r.width = c.width;
  r.height = c.height;
  r.num_frames = c.frames;
  r.seed = c.seed;
  return r;
}

// The engine's own frames for the clip: uint8 [n, H, W, 3].
at::Tensor engine_frames(const Clip& c) {
  CollectSink sink;
  h3::StreamControl cancel;
  engine_for(c)->generate(request_for(c), sink, {}, cancel);
  const at::Tensor all = at::cat(sink.chunks, 0);
  EXPECT_EQ(all.size(0), c.frames);
  return all;
}

// Each plane's visible bytes of video buffer `b` ([rows, row bytes]; packed formats: one plane of
// width * pixel-stride bytes a row), appended to `planes` (one list per plane).
void append_planes(const GstVideoInfo& info, GstBuffer* b, std::vector<std::vector<at::Tensor>>* planes) {
  GstVideoFrame f;
  ASSERT_TRUE(gst_video_frame_map(&f, &info, b, GST_MAP_READ));
  planes->resize(GST_VIDEO_FRAME_N_PLANES(&f));
  for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(&f); ++p) {
    const int rows = GST_VIDEO_FRAME_COMP_HEIGHT(&f, p);
    const int row_bytes = GST_VIDEO_FRAME_COMP_WIDTH(&f, p) * GST_VIDEO_FRAME_COMP_PSTRIDE(&f, p);
    const int stride = GST_VIDEO_FRAME_PLANE_STRIDE(&f, p);
    const auto* px = static_cast<const uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&f, p));
    at::Tensor plane = at::empty({rows, row_bytes}, at::kByte);
    for (int y = 0; y < rows; ++y) std::memcpy(plane[y].data_ptr<uint8_t>(), px + y * stride, row_bytes);
    (*planes)[p].push_back(plane);
  }
  gst_video_frame_unmap(&f);
}

// The element's buffers for the clip in `format`: each plane's visible bytes, [n, rows, row
// bytes] (packed formats: one plane of width * pixel-stride bytes a row).
std::vector<at::Tensor> element_planes(const Clip& c, const char* format = "RGB") {
  const std::string l = "h3videosrc prompt=\"a red kite\" width=" + std::to_string(c.width) +
                        " height=" + std::to_string(c.height) + " num-frames=" + std::to_string(c.frames) +
                        " seed=" + std::to_string(c.seed) + " ranks=" + std::to_string(c.ranks) +
                        (c.compute_dtype.empty() ? "" : " compute-dtype=" + c.compute_dtype);
  GstHarness* h = gst_harness_new_parse(l.c_str());
  gst_harness_set_sink_caps_str(h, (std::string("video/x-raw,format=") + format).c_str());
  gst_harness_play(h);
  GstCaps* caps = nullptr;
  GstVideoInfo info;
  std::vector<std::vector<at::Tensor>> frames;  // per plane
  for (int64_t i = 0; i < c.frames; ++i) {
    GstBuffer* b = gst_harness_pull(h);
    EXPECT_NE(b, nullptr) << "frame " << i;
    if (!b) break;
    if (!caps) {
      caps = gst_pad_get_current_caps(h->sinkpad);
      EXPECT_TRUE(gst_video_info_from_caps(&info, caps));
      EXPECT_STREQ(GST_VIDEO_INFO_NAME(&info), format);
    }
    append_planes(info, b, &frames);
    gst_buffer_unref(b);
  }
  if (caps) gst_caps_unref(caps);
  gst_harness_teardown(h);
  std::vector<at::Tensor> planes;
  for (const auto& f : frames) planes.push_back(at::stack(f));
  return planes;
}

// The element's RGB frames as the engine's layout: uint8 [n, H, W, 3].
at::Tensor element_rgb(const Clip& c) {
  const std::vector<at::Tensor> planes = element_planes(c, "RGB");
  if (planes.size() != 1) {
    ADD_FAILURE() << "RGB came in " << planes.size() << " planes";
    return at::Tensor();
  }
  return planes[0].view({-1, c.height, c.width, 3});
}

int max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kInt) - b.to(at::kInt)).abs().max().item<int>();
}

// The engine's frames of the default clip on one rank, made once for the tests that compare.
const at::Tensor& engine_default_clip() {
  static const at::Tensor frames = engine_frames(Clip{});
  return frames;
}

TEST(H3VideoSrcDeterminism, TheElementsFramesAreTheEnginesFrames) {
  // The padding really is there: rows of 50 RGB pixels are 150 bytes, padded to 152.
  GstVideoInfo info;
  gst_video_info_set_format(&info, GST_VIDEO_FORMAT_RGB, kW, kH);
  ASSERT_GT(GST_VIDEO_INFO_PLANE_STRIDE(&info, 0), kW * 3);
  const at::Tensor el = element_rgb(Clip{});
  ASSERT_TRUE(el.defined());
  EXPECT_TRUE(at::equal(el, engine_default_clip()));
}

TEST(H3VideoSrcDeterminism, OnTwoRanksTheElementsFramesAreTheTwoRankEnginesFrames) {
  Clip c;
  c.ranks = 2;
  const at::Tensor el = element_rgb(c);
  ASSERT_TRUE(el.defined());
  EXPECT_TRUE(at::equal(el, engine_frames(c)));
}

// Over 256 px wide the canvas (320) has two VAE tiles: on two ranks each decodes one and rank 0
// gathers them. The two-rank latents are within the DiT's TP tolerance (1e-4) of the one-rank
// ones, so a pixel may round the other way; a wrong tile would be off by far more.
TEST(H3VideoSrcDeterminism, OnTwoRanksAWideCanvasSplitIntoTilesGivesTheOneRankFrames) {
  Clip c;
  c.width = 300;
  c.height = 40;
  c.frames = 5;  // generated as 22: a short clip keeps the wide canvas cheap
  c.ranks = 2;
  const at::Tensor el = element_rgb(c);
  ASSERT_TRUE(el.defined());
  c.ranks = 1;
  const at::Tensor one = engine_frames(c);
  ASSERT_EQ(el.sizes(), one.sizes());
  const int diff = max_abs_diff(el, one);
  std::printf("wide canvas, element on two ranks vs engine on one: max |diff| %d\n", diff);
  EXPECT_LE(diff, 1);
}

// Plays `p` (h3videosrc ! RGB caps ! fakesink name=s) to its EOS and leaves it in READY, where
// the element keeps its engine open: the RGB frames that reached the sink, as the engine's
// layout [n, H, W, 3].
at::Tensor run_rgb(GstElement* p, const Clip& c) {
  std::vector<GstBuffer*> got;
  GstElement* sink = h3test::by_name(p, "s");
  GstPad* pad = gst_element_get_static_pad(sink, "sink");
  const gulong probe = gst_pad_add_probe(
      pad, GST_PAD_PROBE_TYPE_BUFFER,
      [](GstPad*, GstPadProbeInfo* info, gpointer user) {
        static_cast<std::vector<GstBuffer*>*>(user)->push_back(
            gst_buffer_ref(GST_PAD_PROBE_INFO_BUFFER(info)));
        return GST_PAD_PROBE_OK;
      },
      &got, nullptr);
  GstBus* bus = gst_element_get_bus(p);
  gst_element_set_state(p, GST_STATE_PLAYING);
  const h3test::RunResult r = h3test::wait_for_end(bus, 300);
  EXPECT_EQ(gst_element_set_state(p, GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
  gst_object_unref(bus);
  gst_pad_remove_probe(pad, probe);
  gst_object_unref(pad);
  gst_object_unref(sink);
  EXPECT_FALSE(r.error) << r.message;
  EXPECT_TRUE(r.eos);
  GstVideoInfo info;
  gst_video_info_set_format(&info, GST_VIDEO_FORMAT_RGB, c.width, c.height);
  std::vector<at::Tensor> frames;
  for (GstBuffer* b : got) {
    GstVideoFrame f;
    EXPECT_TRUE(gst_video_frame_map(&f, &info, b, GST_MAP_READ));
    at::Tensor rgb = at::empty({c.height, c.width, 3}, at::kByte);
    const auto* px = static_cast<const uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&f, 0));
    for (int y = 0; y < c.height; ++y) {
      std::memcpy(rgb[y].data_ptr<uint8_t>(), px + y * GST_VIDEO_FRAME_PLANE_STRIDE(&f, 0), c.width * 3);
    }
    gst_video_frame_unmap(&f);
    gst_buffer_unref(b);
    frames.push_back(rgb);
  }
  return frames.empty() ? at::Tensor() : at::stack(frames);
}

// compute-dtype reaches the engine, and changing it in READY, where the element keeps its engine
// open between runs, opens the engine again (EngineOptions compare unequal): bf16 gives the bf16
// engine's frames, every one of them, not the fp32 clip; back at fp32 the fp32 clip again.
TEST(H3VideoSrcDeterminism, ComputeDtypeChangedBetweenRunsGivesThatDtypesEngineFrames) {
  Clip c;
  const std::string l = "h3videosrc name=src prompt=\"a red kite\" width=" + std::to_string(c.width) +
                        " height=" + std::to_string(c.height) + " num-frames=" + std::to_string(c.frames) +
                        " seed=" + std::to_string(c.seed) +
                        " ! video/x-raw,format=RGB ! fakesink name=s sync=false";
  GstElement* p = gst_parse_launch(l.c_str(), nullptr);
  ASSERT_NE(p, nullptr);
  GstElement* src = h3test::by_name(p, "src");
  gchar* dtype = nullptr;
  g_object_get(src, "compute-dtype", &dtype, nullptr);
  EXPECT_EQ(dtype, nullptr) << "unset by default (the device's precision)";
  const at::Tensor fp32 = run_rgb(p, c);
  ASSERT_TRUE(fp32.defined());
  EXPECT_TRUE(at::equal(fp32, engine_default_clip()));

  g_object_set(src, "compute-dtype", "bf16", nullptr);
  g_object_get(src, "compute-dtype", &dtype, nullptr);
  EXPECT_STREQ(dtype, "bf16");
  g_free(dtype);
  const at::Tensor bf16 = run_rgb(p, c);
  ASSERT_TRUE(bf16.defined());
  EXPECT_EQ(bf16.size(0), kN);
  c.compute_dtype = "bf16";
  EXPECT_TRUE(at::equal(bf16, engine_frames(c)));
  EXPECT_FALSE(at::equal(bf16, fp32)) << "compute-dtype=bf16 gave the fp32 frames";

  g_object_set(src, "compute-dtype", "fp32", nullptr);
  EXPECT_TRUE(at::equal(run_rgb(p, c), fp32));
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(src);
  gst_object_unref(p);
}

// h3src shares the property table.
TEST(H3VideoSrcDeterminism, H3SrcHasTheComputeDtypeProperty) {
  GstElement* e = gst_element_factory_make("h3src", nullptr);
  ASSERT_NE(e, nullptr);
  g_object_set(e, "compute-dtype", "bf16", nullptr);
  gchar* dtype = nullptr;
  g_object_get(e, "compute-dtype", &dtype, nullptr);
  EXPECT_STREQ(dtype, "bf16");
  g_free(dtype);
  gst_object_unref(e);
}

TEST(H3VideoSrcDeterminism, SameSeedSameFramesOtherSeedOtherFrames) {
  const at::Tensor a = element_rgb(Clip{});
  ASSERT_TRUE(a.defined());
  EXPECT_TRUE(at::equal(element_rgb(Clip{}), a));
  Clip other;
  other.seed = 6;
  EXPECT_FALSE(at::equal(element_rgb(other), a));
}

// ---- the element's own conversions, against the engine's RGB converted here ----

// Red and blue differ enough in the clip for a swap of the two to show.
void expect_colourful(const at::Tensor& rgb) {
  const double rb =
      (rgb.select(3, 0).to(at::kFloat) - rgb.select(3, 2).to(at::kFloat)).abs().mean().item<double>();
  ASSERT_GT(rb, 10.0) << "mean |R - B| of the engine's frames";
}

TEST(H3VideoSrcConversion, RgbaAndBgrxCarryTheEnginesChannelsInTheirOrder) {
  const at::Tensor rgb = engine_default_clip();
  ASSERT_NO_FATAL_FAILURE(expect_colourful(rgb));
  const std::vector<at::Tensor> rgba = element_planes(Clip{}, "RGBA");
  ASSERT_EQ(rgba.size(), 1u);
  const at::Tensor a = rgba[0].view({kN, kH, kW, 4});
  EXPECT_TRUE(at::equal(a.narrow(3, 0, 3), rgb));
  EXPECT_TRUE(a.select(3, 3).eq(255).all().item<bool>()) << "RGBA alpha is not opaque";

  const std::vector<at::Tensor> bgrx = element_planes(Clip{}, "BGRx");
  ASSERT_EQ(bgrx.size(), 1u);
  const at::Tensor b = bgrx[0].view({kN, kH, kW, 4});
  EXPECT_TRUE(at::equal(b.select(3, 0), rgb.select(3, 2)));  // B
  EXPECT_TRUE(at::equal(b.select(3, 1), rgb.select(3, 1)));  // G
  EXPECT_TRUE(at::equal(b.select(3, 2), rgb.select(3, 0)));  // R
}

// BT.709 limited range (the caps say colorimetry=bt709; no transfer conversion): Y' = 16 + 219 *
// (0.2126 R + 0.7152 G + 0.0722 B), Cb = 128 + 224 * (B - Y) / 1.8556, Cr = 128 + 224 * (R - Y) /
// 1.5748, with R, G, B in [0, 1]. Y' is per pixel (the converter's fixed-point rounding: +-1).
// Chroma is subsampled for the caps' chroma-site=mpeg2: horizontally co-sited with the even
// columns, a [1 2 1] / 4 filter, vertically centred between two rows, their mean; the reference
// does the same on the full-resolution Cb, Cr in double (the converter rounds in between). The
// converter treats the last chroma column as an edge of its own (up to 29 off on this clip), so
// that column is left out; every other sample is within 2.
at::Tensor subsample_mpeg2(const at::Tensor& c) {  // [n, H, W] -> [n, H/2, W/2]
  const int64_t w = c.size(2);
  const at::Tensor left = at::cat({c.narrow(2, 0, 1), c.narrow(2, 0, w - 1)}, 2);
  const at::Tensor right = at::cat({c.narrow(2, 1, w - 1), c.narrow(2, w - 1, 1)}, 2);
  const at::Tensor h = ((left + 2 * c + right) / 4).slice(2, 0, w, 2);
  return (h.slice(1, 0, h.size(1), 2) + h.slice(1, 1, h.size(1), 2)) / 2;
}

TEST(H3VideoSrcConversion, I420IsTheEnginesRgbInBt709LimitedRange) {
  const at::Tensor rgb = engine_default_clip();
  ASSERT_NO_FATAL_FAILURE(expect_colourful(rgb));
  const std::vector<at::Tensor> yuv = element_planes(Clip{}, "I420");
  ASSERT_EQ(yuv.size(), 3u);
  const at::Tensor f = rgb.to(at::kDouble) / 255.0;
  const at::Tensor r = f.select(3, 0), g = f.select(3, 1), b = f.select(3, 2);
  const at::Tensor y = 0.2126 * r + 0.7152 * g + 0.0722 * b;
  const at::Tensor want_y = 16.0 + 219.0 * y;
  const at::Tensor cb = 128.0 + 224.0 * (b - y) / 1.8556;
  const at::Tensor cr = 128.0 + 224.0 * (r - y) / 1.5748;
  const at::Tensor got_y = yuv[0].view({kN, kH, kW}).to(at::kDouble);
  const at::Tensor got_u = yuv[1].view({kN, kH / 2, kW / 2}).to(at::kDouble);
  const at::Tensor got_v = yuv[2].view({kN, kH / 2, kW / 2}).to(at::kDouble);
  const double ey = (got_y - want_y).abs().max().item<double>();
  const int64_t cw = kW / 2 - 1;  // all but the right edge's chroma column
  const double eu = (got_u - subsample_mpeg2(cb)).narrow(2, 0, cw).abs().max().item<double>();
  const double ev = (got_v - subsample_mpeg2(cr)).narrow(2, 0, cw).abs().max().item<double>();
  std::printf("I420 vs BT.709 of the engine's RGB: max |dY| %.2f, max |dCb| %.2f, max |dCr| %.2f\n", ey, eu,
              ev);
  EXPECT_LE(ey, 1.5);
  EXPECT_LE(eu, 2.0);
  EXPECT_LE(ev, 2.0);
}

// ---- h3src: both pads are the engine's ----

// The engine's frames and soundtrack for the clip with audio: uint8 [n, H, W, 3], f32 [samples, 2].
struct EngineClip {
  at::Tensor frames, samples;
};

EngineClip engine_av(const Clip& c) {
  class Sink : public h3::ChunkSink {
   public:
    void on_chunk(const h3::Chunk& ch) override {
      if (ch.frames.defined()) frames.push_back(ch.frames.contiguous());
      if (ch.audio.defined()) audio.push_back(ch.audio.contiguous());
    }
    std::vector<at::Tensor> frames, audio;
  } sink;
  h3::GenerationRequest r = request_for(c);
  r.audio = true;
  h3::StreamControl cancel;
  engine_for(c)->generate(r, sink, {}, cancel);
  return {at::cat(sink.frames, 0), at::cat(sink.audio, 0)};
}

// h3src's video pad in `format` (each plane's visible bytes, as element_planes) and its audio pad
// in F32LE, for the clip, through appsinks.
struct ElementClip {
  std::vector<at::Tensor> planes;
  at::Tensor samples;  // f32 [samples, 2]
};

ElementClip element_av(const Clip& c, const char* format) {
  const std::string l =
      "h3src name=s prompt=\"a red kite\" width=" + std::to_string(c.width) +
      " height=" + std::to_string(c.height) + " num-frames=" + std::to_string(c.frames) +
      " seed=" + std::to_string(c.seed) + " s.video ! video/x-raw,format=" + format +
      " ! appsink name=v sync=false s.audio ! audio/x-raw,format=F32LE ! appsink name=a sync=false";
  GError* err = nullptr;
  GstElement* p = gst_parse_launch(l.c_str(), &err);
  EXPECT_EQ(err, nullptr);
  if (err) g_error_free(err);
  ElementClip out;
  if (!p) return out;
  GstElement* v = h3test::by_name(p, "v");
  GstElement* a = h3test::by_name(p, "a");
  gst_element_set_state(p, GST_STATE_PLAYING);
  std::vector<std::vector<at::Tensor>> planes;
  // appsink queues without a bound by default: one sink can be read to its end before the other.
  while (GstSample* sample = gst_app_sink_try_pull_sample(GST_APP_SINK(v), 120 * GST_SECOND)) {
    GstVideoInfo info;
    EXPECT_TRUE(gst_video_info_from_caps(&info, gst_sample_get_caps(sample)));
    EXPECT_STREQ(GST_VIDEO_INFO_NAME(&info), format);
    append_planes(info, gst_sample_get_buffer(sample), &planes);
    gst_sample_unref(sample);
  }
  EXPECT_TRUE(gst_app_sink_is_eos(GST_APP_SINK(v))) << "the video pad did not end";
  std::vector<float> samples;
  while (GstSample* sample = gst_app_sink_try_pull_sample(GST_APP_SINK(a), 120 * GST_SECOND)) {
    GstMapInfo map;
    GstBuffer* b = gst_sample_get_buffer(sample);
    EXPECT_TRUE(gst_buffer_map(b, &map, GST_MAP_READ));
    const auto* f = reinterpret_cast<const float*>(map.data);
    samples.insert(samples.end(), f, f + map.size / sizeof(float));
    gst_buffer_unmap(b, &map);
    gst_sample_unref(sample);
  }
  EXPECT_TRUE(gst_app_sink_is_eos(GST_APP_SINK(a))) << "the audio pad did not end";
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(v);
  gst_object_unref(a);
  gst_object_unref(p);
  for (const auto& f : planes) out.planes.push_back(at::stack(f));
  out.samples =
      at::from_blob(samples.data(), {static_cast<int64_t>(samples.size() / 2), 2}, at::kFloat).clone();
  return out;
}

TEST(H3SrcDeterminism, BothPadsAreTheEnginesFramesAndSamplesForTheSameRequest) {
  const EngineClip want = engine_av(Clip{});
  const ElementClip got = element_av(Clip{}, "RGB");
  ASSERT_EQ(got.planes.size(), 1u);
  EXPECT_TRUE(at::equal(got.planes[0].view({-1, kH, kW, 3}), want.frames)) << "video: the engine's RGB";
  ASSERT_EQ(got.samples.sizes(), want.samples.sizes());
  EXPECT_TRUE(at::equal(got.samples, want.samples)) << "audio: the engine's f32 samples";
  EXPECT_GT(want.samples.abs().max().item<float>(), 0.0f);
}

// h3src's video pad converts as h3videosrc does (the same FrameWriter), whose I420 is checked
// against BT.709 of the engine's RGB above.
TEST(H3SrcDeterminism, ItsI420FramesAreH3VideoSrcsI420Frames) {
  const std::vector<at::Tensor> video_src = element_planes(Clip{}, "I420");
  const ElementClip src = element_av(Clip{}, "I420");
  ASSERT_EQ(video_src.size(), 3u);
  ASSERT_EQ(src.planes.size(), 3u);
  for (size_t p = 0; p < 3; ++p) EXPECT_TRUE(at::equal(src.planes[p], video_src[p])) << "plane " << p;
}

}  // namespace
