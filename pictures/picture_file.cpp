#include "pictures/picture_file.h"

#include <glib/gstdio.h>
#include <gst/app/gstappsink.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>

#include "h3/error.h"
#include "h3/limits.h"
#include "pictures/stored_orientation.h"

namespace h3::pictures {
namespace {

// The largest side let through to the decoder's output allocation (the pixel count is checked
// once the picture's size is known).
constexpr int kMaxPictureSide = 16384;

struct Unref {
  void operator()(GstElement* e) const {
    gst_element_set_state(e, GST_STATE_NULL);
    gst_object_unref(e);
  }
};
using Pipeline = std::unique_ptr<GstElement, Unref>;
struct ObjectUnref {
  void operator()(gpointer o) const { gst_object_unref(o); }
};
template <typename T>
using Ref = std::unique_ptr<T, ObjectUnref>;

// Whether a picture of w x h is taken: each side kMinPictureSide to kMaxPictureSide, at most
// kMaxPicturePixels in all.
bool size_taken(int64_t w, int64_t h) {
  return w >= kMinPictureSide && h >= kMinPictureSide && w <= kMaxPictureSide && h <= kMaxPictureSide &&
         w * h <= kMaxPicturePixels;
}

// The size of the picture, as first announced: by a parser or a demuxer (PNG's and JPEG's
// parsers read it from the header) before any decoder is plugged, else by the decoder's output
// caps. `refused` is set where a size outside the limits was met; nothing is decoded past it.
struct Announced {
  std::atomic<int> width{0}, height{0};
  std::atomic<bool> refused{false};
  // Records the size in `caps` (if any); false when it is refused.
  bool check(const GstCaps* caps) {
    const GstStructure* s = caps && gst_caps_get_size(caps) > 0 ? gst_caps_get_structure(caps, 0) : nullptr;
    int w = 0, h = 0;
    if (!s || !gst_structure_get_int(s, "width", &w) || !gst_structure_get_int(s, "height", &h)) return true;
    if (refused) return false;  // the first refused size is the one named
    width = w;
    height = h;
    if (!size_taken(w, h)) refused = true;
    return !refused;
  }
};

// At the first converter's input: the decoder's caps event records the size it announced, and
// an accept-caps query for a size outside the limits is answered no, so that the caps (and with
// them any buffer of that size) never pass.
GstPadProbeReturn on_input(GstPad*, GstPadProbeInfo* info, gpointer data) {
  auto* a = static_cast<Announced*>(data);
  if (info->type & GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM) {
    GstEvent* ev = GST_PAD_PROBE_INFO_EVENT(info);
    if (GST_EVENT_TYPE(ev) == GST_EVENT_CAPS) {
      GstCaps* caps = nullptr;
      gst_event_parse_caps(ev, &caps);
      a->check(caps);
    }
    return GST_PAD_PROBE_OK;
  }
  GstQuery* q = GST_PAD_PROBE_INFO_QUERY(info);
  if (GST_QUERY_TYPE(q) != GST_QUERY_ACCEPT_CAPS) return GST_PAD_PROBE_OK;
  GstCaps* caps = nullptr;
  gst_query_parse_accept_caps(q, &caps);
  if (a->check(caps)) return GST_PAD_PROBE_OK;
  gst_query_set_accept_caps_result(q, FALSE);
  return GST_PAD_PROBE_HANDLED;
}

std::string to_uri(const std::string& location, const std::string& name) {
  if (gst_uri_is_valid(location.c_str())) return location;
  if (!g_file_test(location.c_str(), G_FILE_TEST_EXISTS)) {
    throw Error(ErrorKind::kNotFound, name + ": no such file");
  }
  if (g_file_test(location.c_str(), G_FILE_TEST_IS_DIR)) {
    throw Error(ErrorKind::kInvalidArgument, name + ": a folder, not a picture");
  }
  GStatBuf st;
  if (g_stat(location.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0) {
    throw Error(ErrorKind::kInvalidArgument, name + ": the file is empty (0 bytes)");
  }
  GError* err = nullptr;
  gchar* uri = gst_filename_to_uri(location.c_str(), &err);
  if (!uri) {
    const std::string why = err ? err->message : "not a file name";
    g_clear_error(&err);
    throw Error(ErrorKind::kInvalidArgument, name + ": " + why);
  }
  std::string out(uri);
  g_free(uri);
  return out;
}

// The file name of a local picture (a name, or a file:// URI); empty for any other URI.
std::string local_path(const std::string& location) {
  if (!gst_uri_is_valid(location.c_str())) return location;
  if (!gst_uri_has_protocol(location.c_str(), "file")) return {};
  gchar* path = g_filename_from_uri(location.c_str(), nullptr, nullptr);
  std::string out = path ? path : "";
  g_free(path);
  return out;
}

[[noreturn]] void refuse_size(const std::string& name, int w, int h) {
  const int64_t pixels = int64_t(w) * h;
  const std::string mp = pixels >= 1000000 ? " (" + std::to_string(pixels / 1000000) + " MP)" : "";
  throw Error(ErrorKind::kInvalidArgument,
              name + " is " + std::to_string(w) + "x" + std::to_string(h) + mp + ": each side must be " +
                  std::to_string(kMinPictureSide) + " to " + std::to_string(kMaxPictureSide) +
                  " pixels, and at most " + std::to_string(kMaxPicturePixels / 1000000) +
                  " MP (8192 x 8192) in all; scale or crop it");
}

// The bus's error, if any, as a message naming the picture. `no_decoder` is set when the error
// says that nothing in the file could be decoded as asked (decodebin's missing plug-in: a file of
// sound alone read for pictures), not that the file is damaged.
std::string bus_error(GstBus* bus, const std::string& name, const Announced& a, bool* eos,
                      bool* no_decoder = nullptr, bool reference = false) {
  while (GstMessage* m = gst_bus_pop_filtered(bus, GstMessageType(GST_MESSAGE_ERROR | GST_MESSAGE_EOS))) {
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_EOS) {
      *eos = true;
      gst_message_unref(m);
      continue;
    }
    GError* err = nullptr;
    gchar* debug = nullptr;
    gst_message_parse_error(m, &err, &debug);
    const std::string why = err ? err->message : "unknown error";
    const bool missing =
        err && err->domain == GST_RESOURCE_ERROR && err->code == GST_RESOURCE_ERROR_NOT_FOUND;
    if (no_decoder)
      *no_decoder = err && err->domain == GST_CORE_ERROR && err->code == GST_CORE_ERROR_MISSING_PLUGIN;
    g_clear_error(&err);
    g_free(debug);
    gst_message_unref(m);
    // A refused size is what stopped the stream, whatever the element that noticed says.
    if (a.refused) refuse_size(name, a.width, a.height);
    if (missing) throw Error(ErrorKind::kNotFound, name + ": " + why);
    if (reference) {
      return name + ": GStreamer could not decode it (" + why +
             "); give a picture, video or sound in a format GStreamer has a decoder for";
    }
    return name + ": GStreamer could not decode a picture from it (" + why +
           "); give a picture in a format GStreamer has a decoder for (PNG, JPEG, WebP, ...)";
  }
  return {};
}

// Copies a decoded RGB frame into `rgb` (width * 3 bytes a row, whatever GStreamer's stride).
void copy_rgb(GstSample* sample, const std::string& name, int* width, int* height,
              std::vector<uint8_t>& rgb) {
  GstVideoInfo info;
  if (!gst_video_info_from_caps(&info, gst_sample_get_caps(sample))) {
    throw Error(ErrorKind::kInvalidArgument, name + ": the decoded picture has no video format");
  }
  const int w = GST_VIDEO_INFO_WIDTH(&info), h = GST_VIDEO_INFO_HEIGHT(&info);
  if (!size_taken(w, h)) refuse_size(name, w, h);
  GstVideoFrame frame;
  if (!gst_video_frame_map(&frame, &info, gst_sample_get_buffer(sample), GST_MAP_READ)) {
    throw Error(ErrorKind::kInvalidArgument, name + ": the decoded picture could not be read");
  }
  *width = w;
  *height = h;
  rgb.resize(static_cast<size_t>(w) * h * 3);
  const auto* src = static_cast<const uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&frame, 0));
  const int stride = GST_VIDEO_FRAME_PLANE_STRIDE(&frame, 0);
  for (int y = 0; y < h; ++y) std::copy_n(src + y * stride, w * 3, rgb.data() + size_t(y) * w * 3);
  gst_video_frame_unmap(&frame);
}

// How long the stream of `pipeline` says it lasts, in seconds; 0 where it does not say.
double stream_seconds(GstElement* pipeline) {
  gint64 d = 0;
  if (!gst_element_query_duration(pipeline, GST_FORMAT_TIME, &d) || d <= 0) return 0;
  return static_cast<double>(d) / GST_SECOND;
}

// A stream that ended (EOS) well before the time its file announces, and before `max_seconds`
// (where reading would have stopped anyway), was cut short: a truncated or damaged file, whose
// decoders dropped what they could not read. Refused rather than read as a shorter one. The
// slack (a tenth, at least two `unit`s) leaves room for durations a container only estimates.
void check_complete(const std::string& name, const char* what, double got_s, double announced_s,
                    double max_seconds, double unit_s) {
  if (announced_s <= 0) return;
  const double expected = std::min(announced_s, max_seconds);
  if (got_s + std::max(2 * unit_s, 0.1 * expected) >= expected) return;
  char text[160];
  std::snprintf(text, sizeof text, ": its %s ends after %.3f s, but the file says it lasts %.3f s", what,
                got_s, announced_s);
  throw Error(ErrorKind::kInvalidArgument, name + text + ": it is truncated or damaged; give the whole file");
}

// When data last moved anywhere in a pipeline: a buffer pushed or pulled through any pad of any
// element, decodebin's own included. decodebin keeps to itself the error of an element it is
// still setting up (its "filtered" errors), so a demuxer that fails at once on a damaged file (a
// cut Ogg, a broken AVI header: 1 run in 3) can stop the stream with no message at all, and the
// reader would wait for its whole timeout. A local file never idles for long while it is read.
class Activity {
 public:
  // Watches every element of `pipeline`, and every one added to it later.
  void watch(GstElement* pipeline) {
    last_us_ = g_get_monotonic_time();
    g_signal_connect(pipeline, "deep-element-added", G_CALLBACK(on_added), this);
    GstIterator* it = gst_bin_iterate_recurse(GST_BIN(pipeline));
    gst_iterator_foreach(
        it, [](const GValue* v, gpointer self) { on_element(GST_ELEMENT(g_value_get_object(v)), self); },
        this);
    gst_iterator_free(it);
  }
  double idle_s() const { return static_cast<double>(g_get_monotonic_time() - last_us_) / G_USEC_PER_SEC; }

 private:
  static void on_added(GstBin*, GstBin*, GstElement* element, gpointer self) { on_element(element, self); }
  static void on_element(GstElement* element, gpointer self) {
    g_signal_connect(element, "pad-added", G_CALLBACK(on_pad), self);
    GstIterator* it = gst_element_iterate_pads(element);
    gst_iterator_foreach(
        it, [](const GValue* v, gpointer s) { on_pad(nullptr, GST_PAD(g_value_get_object(v)), s); }, self);
    gst_iterator_free(it);
  }
  static void on_pad(GstElement*, GstPad* pad, gpointer self) {
    gst_pad_add_probe(pad, GstPadProbeType(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_BUFFER_LIST),
                      on_data, self, nullptr);
  }
  static GstPadProbeReturn on_data(GstPad*, GstPadProbeInfo*, gpointer self) {
    static_cast<Activity*>(self)->last_us_ = g_get_monotonic_time();
    return GST_PAD_PROBE_OK;
  }
  std::atomic<gint64> last_us_{0};
};

// How long a local file's pipeline may move no data before the reader gives up on it.
constexpr double kLocalStallSeconds = 10.0;

[[noreturn]] void refuse_stalled(const std::string& name) {
  throw Error(ErrorKind::kInvalidArgument,
              name +
                  ": GStreamer stopped reading it with neither a picture nor an error (a demuxer or decoder "
                  "failed without a message): the file is damaged or not something GStreamer can decode");
}

// gst_parse_launch of a reading pipeline; throws naming what it was to read.
GstElement* launch(const std::string& desc, const std::string& name) {
  GError* err = nullptr;
  GstElement* raw = gst_parse_launch(desc.c_str(), &err);
  if (!raw) {
    const std::string why = err ? err->message : "unknown error";
    g_clear_error(&err);
    throw Error(ErrorKind::kInternal, "could not build the pipeline that reads " + name + ": " + why +
                                          " (are GStreamer's base plugins installed?)");
  }
  g_clear_error(&err);
  return raw;
}

struct SampleUnref {
  void operator()(GstSample* s) const { gst_sample_unref(s); }
};
using Sample = std::unique_ptr<GstSample, SampleUnref>;

// uridecodebin ! videoconvert ! videoflip (upright by the stream's orientation tag: a JPEG's EXIF,
// a video's display matrix; for a local PNG or WebP file, by the EXIF orientation read from the
// file, which their decoders do not report) ! videoconvert ! RGB within the side limits ! appsink,
// playing. Only raw video is exposed (a video's audio is noticed here, and decoded by read_sound in
// a pass of its own). The size is judged where it is first announced: a parser's or demuxer's caps
// stop the plugging before any decoder exists (on_autoplug; parsers are plugged first, see
// on_factories); a decoder's caps are refused at the first converter's input.
class Decoder {
 public:
  // `reference`: a Ref2VA reference (a picture, a video or sound), named so in messages.
  Decoder(const std::string& location, const std::string& name, bool reference = false)
      : name_(name), reference_(reference) {
    if (location.empty()) throw Error(ErrorKind::kInvalidArgument, name + ": no file or URI given");
    GError* err = nullptr;
    if (!gst_init_check(nullptr, nullptr, &err)) {
      const std::string why = err ? err->message : "unknown error";
      g_clear_error(&err);
      throw Error(ErrorKind::kInternal, "GStreamer could not be initialised to read " + name + ": " + why);
    }
    const std::string uri = to_uri(location, name);
    const std::string desc =
        "uridecodebin name=src caps=video/x-raw expose-all-streams=false ! videoconvert name=in ! "
        "videoflip name=flip video-direction=auto ! videoconvert name=conv ! "
        "video/x-raw,format=RGB,width=[" +
        std::to_string(kMinPictureSide) + "," + std::to_string(kMaxPictureSide) + "],height=[" +
        std::to_string(kMinPictureSide) + "," + std::to_string(kMaxPictureSide) +
        "] ! appsink name=sink sync=false max-buffers=1";
    GstElement* raw = launch(desc, name);
    pipeline_.reset(raw);
    GstElement* src = gst_bin_get_by_name(GST_BIN(raw), "src");
    g_object_set(src, "uri", uri.c_str(), nullptr);
    g_signal_connect(src, "autoplug-continue", G_CALLBACK(on_autoplug), &watch_);
    g_signal_connect(src, "autoplug-factories", G_CALLBACK(on_factories), nullptr);
    gst_object_unref(src);
    if (const std::string path = local_path(location); !path.empty()) {
      if (const auto method = stored_orientation(path)) {
        GstElement* flip = gst_bin_get_by_name(GST_BIN(raw), "flip");
        g_object_set(flip, "video-direction", *method, nullptr);  // instead of the tag it never gets
        gst_object_unref(flip);
      }
    }
    GstElement* in = gst_bin_get_by_name(GST_BIN(raw), "in");
    GstPad* in_sink = gst_element_get_static_pad(in, "sink");
    gst_pad_add_probe(
        in_sink, GstPadProbeType(GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM | GST_PAD_PROBE_TYPE_QUERY_DOWNSTREAM),
        on_input, &watch_.size, nullptr);
    gst_object_unref(in_sink);
    gst_object_unref(in);
    sink_.reset(gst_bin_get_by_name(GST_BIN(raw), "sink"));
    bus_.reset(gst_element_get_bus(raw));
    local_ = !local_path(location).empty();
    activity_.watch(raw);
    if (gst_element_set_state(raw, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
      bool eos = false;
      std::string failure = bus_error(bus_.get(), name, watch_.size, &eos, nullptr, reference);
      if (failure.empty()) failure = name + ": could not be opened";
      throw Error(ErrorKind::kInvalidArgument, failure);
    }
  }

  // The next decoded frame, or null at the end of the stream. Throws for a decoding error or
  // when nothing arrives within `timeout_s`.
  Sample next(double timeout_s) {
    GstAppSink* sink = GST_APP_SINK(sink_.get());
    const gint64 deadline = g_get_monotonic_time() + static_cast<gint64>(timeout_s * G_USEC_PER_SEC);
    for (;;) {
      if (GstSample* s = gst_app_sink_try_pull_sample(sink, 50 * GST_MSECOND)) return Sample(s);
      // Refused where it was announced: the stream stops there, with or without an error.
      if (watch_.size.refused) refuse_size(name_, watch_.size.width, watch_.size.height);
      const std::string failure = bus_error(bus_.get(), name_, watch_.size, &eos_, &no_decoder_, reference_);
      if (!failure.empty()) throw Error(ErrorKind::kInvalidArgument, failure);
      if (eos_ || gst_app_sink_is_eos(sink)) return nullptr;
      if (local_ && activity_.idle_s() > std::min(timeout_s, kLocalStallSeconds)) refuse_stalled(name_);
      if (g_get_monotonic_time() > deadline) {
        throw Error(ErrorKind::kInvalidArgument,
                    name_ + ": no picture within " + std::to_string(static_cast<int>(timeout_s)) + " s");
      }
    }
  }

  bool has_audio() const { return watch_.streams.audio; }
  // The last error said no decoder could make pictures of the file (not that it is damaged).
  bool no_decoder() const { return no_decoder_; }
  double announced_seconds() const { return stream_seconds(pipeline_.get()); }
  bool has_pictures() const { return watch_.streams.pictures; }

 private:
  struct Streams {
    std::atomic<bool> audio{false}, pictures{false};
  };
  // decodebin plugs no JPEG parser of its own accord (jpegparse has no rank), and the parser is what
  // reads a JPEG's EXIF orientation into the image-orientation tag that videoflip turns the
  // picture upright by, as the reference pipelines' load_image (Pillow's exif_transpose) does. It
  // is offered for unparsed JPEG; every other stream gets the factories decodebin itself would
  // try (the decodable ones of at least marginal rank, best first, that take its caps), with the
  // parsers first while the stream is unparsed: a parser announces the picture's size from its
  // header (pngparse: PNG's IHDR) before any decoder exists, where on_autoplug refuses it — a
  // decoder plugged first would allocate the whole picture even when its caps are refused
  // (GstVideoDecoder's fallback allocation). A handler's answer replaces decodebin's own.
  static GValueArray* on_factories(GstElement*, GstPad*, GstCaps* caps, gpointer) {
    static GList* const decodable = g_list_sort(
        gst_element_factory_list_get_elements(GST_ELEMENT_FACTORY_TYPE_DECODABLE, GST_RANK_MARGINAL),
        gst_plugin_feature_rank_compare_func);
    const GstStructure* s = caps && gst_caps_get_size(caps) > 0 ? gst_caps_get_structure(caps, 0) : nullptr;
    gboolean parsed = FALSE;
    const bool unparsed = s && !(gst_structure_get_boolean(s, "parsed", &parsed) && parsed);
    const bool jpeg = unparsed && gst_structure_has_name(s, "image/jpeg");
    GstElementFactory* parser = jpeg ? gst_element_factory_find("jpegparse") : nullptr;
    GList* chosen =
        parser ? g_list_append(nullptr, parser)
               : gst_element_factory_list_filter(decodable, caps, GST_PAD_SINK, gst_caps_is_fixed(caps));
    if (unparsed && !parser) {
      GList *parsers = nullptr, *others = nullptr;
      for (GList* f = chosen; f; f = f->next) {
        auto* factory = static_cast<GstElementFactory*>(f->data);
        if (gst_element_factory_list_is_type(factory, GST_ELEMENT_FACTORY_TYPE_PARSER)) {
          parsers = g_list_append(parsers, factory);
        } else {
          others = g_list_append(others, factory);
        }
      }
      g_list_free(chosen);  // the factories themselves move to the two lists
      chosen = g_list_concat(parsers, others);
    }
    G_GNUC_BEGIN_IGNORE_DEPRECATIONS  // the signal's type is GValueArray
        GValueArray* factories = g_value_array_new(g_list_length(chosen));
    for (GList* f = chosen; f; f = f->next) {
      GValue v = G_VALUE_INIT;
      g_value_init(&v, G_TYPE_OBJECT);
      g_value_set_object(&v, f->data);
      g_value_array_append(factories, &v);
      g_value_unset(&v);
    }
    G_GNUC_END_IGNORE_DEPRECATIONS
    gst_plugin_feature_list_free(chosen);
    return factories;
  }
  // What the streams met so far say, written from the streaming threads.
  struct Watch {
    Streams streams;
    Announced size;
  };
  // Every stream the decoder meets on its way passes here: an audio one is noted, then left; a
  // stream of pictures (video or image caps with a width: a container's caps have none) is noted
  // too, so that a file whose pictures fail to decode is never read as sound alone. Caps with a
  // size (a parser's or a demuxer's, before the decoder is plugged) outside the limits stop the
  // plugging: no decoder is made for that stream.
  static gboolean on_autoplug(GstElement*, GstPad*, GstCaps* caps, gpointer data) {
    const GstStructure* s = caps && gst_caps_get_size(caps) > 0 ? gst_caps_get_structure(caps, 0) : nullptr;
    if (!s) return TRUE;
    auto* watch = static_cast<Watch*>(data);
    const char* kind = gst_structure_get_name(s);
    if (g_str_has_prefix(kind, "audio/")) watch->streams.audio = true;
    if ((g_str_has_prefix(kind, "video/") || g_str_has_prefix(kind, "image/")) &&
        gst_structure_has_field(s, "width")) {
      watch->streams.pictures = true;
      if (!watch->size.check(caps)) return FALSE;
    }
    return TRUE;
  }

  std::string name_;
  bool reference_ = false;
  // Declared before the pipeline: the probe and the signals may write to it until the pipeline
  // is stopped, which its owner does on every way out.
  Watch watch_;
  Activity activity_;
  bool local_ = false;
  bool eos_ = false;
  bool no_decoder_ = false;
  Ref<GstBus> bus_;
  Ref<GstElement> sink_;
  Pipeline pipeline_;
};

// The frame rate a sample's caps announce; 0 for none (a still picture, a variable rate).
double caps_fps(GstSample* sample, int64_t* n, int64_t* d) {
  const GstStructure* s = gst_caps_get_structure(gst_sample_get_caps(sample), 0);
  int fn = 0, fd = 1;
  if (!gst_structure_get_fraction(s, "framerate", &fn, &fd) || fn <= 0 || fd <= 0) return 0;
  *n = fn;
  *d = fd;
  return static_cast<double>(fn) / static_cast<double>(fd);
}

// uridecodebin ! audioconvert ! interleaved F32 of 1 or 2 channels (more are mixed down to
// stereo by audioconvert) ! appsink: a file's first audio stream at its own rate.
Audio read_sound(const std::string& location, const std::string& name, double max_seconds, double timeout_s) {
  const std::string uri = to_uri(location, name);
  const std::string desc =
      "uridecodebin name=src caps=audio/x-raw expose-all-streams=false ! audioconvert ! "
      "audio/x-raw,format=F32LE,layout=interleaved,channels=[1,2] ! appsink name=sink sync=false "
      "max-buffers=16";
  GstElement* raw = launch(desc, name);
  Activity activity;  // declared before the pipeline: its probes may write to it until the pipeline stops
  Pipeline pipeline(raw);
  GstElement* src = gst_bin_get_by_name(GST_BIN(raw), "src");
  g_object_set(src, "uri", uri.c_str(), nullptr);
  gst_object_unref(src);
  activity.watch(raw);
  const bool local = !local_path(location).empty();
  Ref<GstElement> sink(gst_bin_get_by_name(GST_BIN(raw), "sink"));
  Ref<GstBus> bus(gst_element_get_bus(raw));
  auto failure = [&]() -> std::string {
    while (GstMessage* m = gst_bus_pop_filtered(bus.get(), GST_MESSAGE_ERROR)) {
      GError* e = nullptr;
      gst_message_parse_error(m, &e, nullptr);
      const std::string why = e ? e->message : "unknown error";
      g_clear_error(&e);
      gst_message_unref(m);
      return name + ": GStreamer could not decode its sound (" + why + ")";
    }
    return {};
  };
  if (gst_element_set_state(raw, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    std::string why = failure();
    throw Error(ErrorKind::kInvalidArgument, why.empty() ? name + ": could not be opened" : why);
  }
  Audio a;
  a.source = location;
  int64_t wanted = -1;  // samples per channel within max_seconds, once the rate is known
  const gint64 deadline = g_get_monotonic_time() + static_cast<gint64>(timeout_s * G_USEC_PER_SEC);
  for (;;) {
    Sample sample(gst_app_sink_try_pull_sample(GST_APP_SINK(sink.get()), 50 * GST_MSECOND));
    if (!sample) {
      const std::string why = failure();
      if (!why.empty()) throw Error(ErrorKind::kInvalidArgument, why);
      if (gst_app_sink_is_eos(GST_APP_SINK(sink.get()))) {
        if (a.rate > 0) {
          check_complete(name, "sound", static_cast<double>(a.frames()) / static_cast<double>(a.rate),
                         stream_seconds(raw), max_seconds, 0.05);
        }
        break;
      }
      if (local && activity.idle_s() > std::min(timeout_s, kLocalStallSeconds)) refuse_stalled(name);
      if (g_get_monotonic_time() > deadline) {
        throw Error(ErrorKind::kInvalidArgument,
                    name + ": no sound within " + std::to_string(static_cast<int>(timeout_s)) + " s");
      }
      continue;
    }
    if (wanted < 0) {
      const GstStructure* st = gst_caps_get_structure(gst_sample_get_caps(sample.get()), 0);
      int rate = 0, channels = 0;
      if (!gst_structure_get_int(st, "rate", &rate) || !gst_structure_get_int(st, "channels", &channels) ||
          rate <= 0 || channels < 1 || channels > 2) {
        throw Error(ErrorKind::kInvalidArgument,
                    name + ": its decoded sound has no usable rate or channel count");
      }
      a.rate = rate;
      a.channels = channels;
      // The model reads no sound past the clip's duration (one more sample than it keeps).
      wanted = static_cast<int64_t>(max_seconds * rate) + 1;
    }
    GstMapInfo map;
    GstBuffer* buffer = gst_sample_get_buffer(sample.get());
    if (!gst_buffer_map(buffer, &map, GST_MAP_READ)) {
      throw Error(ErrorKind::kInvalidArgument, name + ": its decoded sound could not be read");
    }
    const auto* f = reinterpret_cast<const float*>(map.data);
    a.samples.insert(a.samples.end(), f, f + map.size / sizeof(float));
    gst_buffer_unmap(buffer, &map);
    if (a.frames() >= wanted) {
      a.samples.resize(static_cast<size_t>(wanted * a.channels));
      break;
    }
  }
  if (a.samples.empty())
    throw Error(ErrorKind::kInvalidArgument, name + ": holds no sound (nothing decoded)");
  return a;
}

}  // namespace

Picture read_picture(const std::string& location, const std::string& what, double timeout_s) {
  const std::string name = what + " '" + location + "'";
  Decoder decoder(location, name);
  const Sample sample = decoder.next(timeout_s);
  if (!sample)
    throw Error(ErrorKind::kInvalidArgument,
                name + ": holds no picture (nothing GStreamer decoded from it is video)");
  Picture p;
  p.source = location;
  int w = 0, h = 0;
  copy_rgb(sample.get(), name, &w, &h, p.rgb);
  p.width = w;
  p.height = h;
  return p;
}

Reference read_reference(const std::string& location, const std::string& what, double max_seconds,
                         double timeout_s) {
  const std::string name = what + " '" + location + "'";
  Decoder decoder(location, name, /*reference=*/true);
  Reference r;
  Sample first;
  try {
    first = decoder.next(timeout_s);
  } catch (const Error&) {
    // A file of sound alone: its video decoder found nothing to decode.
    // A damaged file is refused here, with what its demuxer or decoder said, rather than read
    // again for its sound.
    if (!decoder.has_audio() || decoder.has_pictures() || !decoder.no_decoder()) throw;
  }
  if (!first && decoder.has_audio() && !decoder.has_pictures()) {
    r.audio = read_sound(location, name, max_seconds, timeout_s);
    return r;
  }
  if (!first)
    throw Error(ErrorKind::kInvalidArgument,
                name + ": holds no picture or sound (nothing GStreamer decoded from it is video or audio)");
  int w = 0, h = 0;
  std::vector<uint8_t> rgb;
  copy_rgb(first.get(), name, &w, &h, rgb);
  int64_t fps_n = 0, fps_d = 1;
  double fps = caps_fps(first.get(), &fps_n, &fps_d);
  const GstClockTime pts0 = GST_BUFFER_PTS(gst_sample_get_buffer(first.get()));
  first.reset();
  Sample next = decoder.next(timeout_s);
  if (!next) {  // one picture: an image (or a video of one frame, which is read as one)
    r.image.source = location;
    r.image.width = w;
    r.image.height = h;
    r.image.rgb = std::move(rgb);
    return r;
  }
  Video& v = r.video;
  v.source = location;
  v.width = w;
  v.height = h;
  v.frames.push_back(std::move(rgb));
  GstClockTime last_pts = pts0;
  const int64_t frame_bytes = int64_t(w) * h * 3;
  for (; next; next = decoder.next(timeout_s)) {
    int fw = 0, fh = 0;
    std::vector<uint8_t> f;
    copy_rgb(next.get(), name, &fw, &fh, f);
    if (fw != w || fh != h) {
      throw Error(ErrorKind::kInvalidArgument, name + ": its frames change size (" + std::to_string(w) + "x" +
                                                   std::to_string(h) + ", then " + std::to_string(fw) + "x" +
                                                   std::to_string(fh) + "); give a video of one size");
    }
    last_pts = GST_BUFFER_PTS(gst_sample_get_buffer(next.get()));
    v.frames.push_back(std::move(f));
    const int64_t n = static_cast<int64_t>(v.frames.size());
    if (n * frame_bytes > kMaxReferenceVideoBytes) {
      throw Error(ErrorKind::kInvalidArgument,
                  name + ": more than " + std::to_string(kMaxReferenceVideoBytes >> 30) +
                      " GiB of RGB frames (" + std::to_string(n) + " frames of " + std::to_string(w) + "x" +
                      std::to_string(h) + ") within the clip's duration; give a shorter or smaller video");
    }
    // Frames past the clip's duration are never read by the model.
    if (fps > 0 && static_cast<double>(n) / fps >= max_seconds) break;
  }
  if (fps <= 0) {
    // No announced rate (a variable one): the average over the frames' timestamps.
    const int64_t n = static_cast<int64_t>(v.frames.size());
    if (!GST_CLOCK_TIME_IS_VALID(pts0) || !GST_CLOCK_TIME_IS_VALID(last_pts) || last_pts <= pts0) {
      throw Error(ErrorKind::kInvalidArgument,
                  name +
                      ": a video without a frame rate or timestamps GStreamer can read; give one with a "
                      "constant frame rate");
    }
    fps_n = (n - 1) * static_cast<int64_t>(GST_SECOND);
    fps_d = static_cast<int64_t>(last_pts - pts0);
  }
  v.fps_n = fps_n;
  v.fps_d = fps_d;
  if (!next) {  // the stream ended before the clip's duration: did it end where the file says?
    const double frame_s = static_cast<double>(fps_d) / static_cast<double>(fps_n);
    check_complete(name, "video", static_cast<double>(v.frames.size()) * frame_s, decoder.announced_seconds(),
                   max_seconds, frame_s);
  }
  if (decoder.has_audio())
    v.soundtrack = read_sound(location, name + "'s soundtrack", max_seconds, timeout_s);
  return r;
}

}  // namespace h3::pictures
