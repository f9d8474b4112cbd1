// A small application embedding h3videosrc: it pulls every frame from an
// appsink, counts them, and says when the first and the last frame arrived
// (seconds since the pipeline was set to PLAYING) and when the engine finished
// decoding (its h3-progress "done" message).
//
// Usage: h3-gst-app [--frames N] [--seed S] [--prompt TEXT] [--format RGB|RGBA|BGRx|I420]
//                   [--model DIR] [--queue-chunks N]
// Exit status: 0 when the stream ended with EOS, 1 on an error, 2 on bad usage.
#include <gst/app/gstappsink.h>
#include <gst/gst.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

struct Options {
  int frames = -1;
  long long seed = -1;
  std::string prompt, model, format = "RGB";
  int queue_chunks = -1;
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (a == "--frames")
      o->frames = std::atoi(v);
    else if (a == "--seed")
      o->seed = std::atoll(v);
    else if (a == "--prompt")
      o->prompt = v;
    else if (a == "--model")
      o->model = v;
    else if (a == "--format")
      o->format = v;
    else if (a == "--queue-chunks")
      o->queue_chunks = std::atoi(v);
    else
      return false;
  }
  return true;
}

double seconds_since(gint64 t0) {
  return static_cast<double>(g_get_monotonic_time() - t0) / G_USEC_PER_SEC;
}

// Bus watcher run from the appsink loop: records the engine's "done" time, and
// reports errors.
struct BusState {
  double done_at = -1;
  bool error = false;
};

void drain_bus(GstBus* bus, gint64 t0, BusState* st) {
  while (GstMessage* m = gst_bus_pop(bus)) {
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ELEMENT) {
      const GstStructure* s = gst_message_get_structure(m);
      if (gst_structure_has_name(s, "h3-progress") &&
          g_strcmp0(gst_structure_get_string(s, "phase"), "done") == 0 && st->done_at < 0)
        st->done_at = seconds_since(t0);
    } else if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR) {
      GError* err = nullptr;
      gchar* dbg = nullptr;
      gst_message_parse_error(m, &err, &dbg);
      std::fprintf(stderr, "h3-gst-app: error from %s: %s\n", GST_OBJECT_NAME(GST_MESSAGE_SRC(m)),
                   err->message);
      if (dbg) std::fprintf(stderr, "h3-gst-app: debug: %s\n", dbg);
      g_error_free(err);
      g_free(dbg);
      st->error = true;
    }
    gst_message_unref(m);
  }
}

}  // namespace

int main(int argc, char** argv) {
  gst_init(&argc, &argv);
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: h3-gst-app [--frames N] [--seed S] [--prompt TEXT] [--format RGB|RGBA|BGRx|I420] "
                 "[--model DIR] [--queue-chunks N]\n");
    return 2;
  }
  GstElement* pipeline = gst_pipeline_new("app");
  GstElement* src = gst_element_factory_make("h3videosrc", "src");
  GstElement* sink = gst_element_factory_make("appsink", "sink");
  if (!src || !sink) {
    std::fprintf(stderr, "h3-gst-app: %s is not available (is GST_PLUGIN_PATH set?)\n",
                 src ? "appsink" : "h3videosrc");
    return 1;
  }
  if (o.frames > 0) g_object_set(src, "num-frames", o.frames, nullptr);
  if (o.seed >= 0) g_object_set(src, "seed", static_cast<guint64>(o.seed), nullptr);
  if (!o.prompt.empty()) g_object_set(src, "prompt", o.prompt.c_str(), nullptr);
  if (!o.model.empty()) g_object_set(src, "model", o.model.c_str(), nullptr);
  if (o.queue_chunks > 0) g_object_set(src, "queue-chunks", o.queue_chunks, nullptr);
  GstCaps* caps = gst_caps_new_simple("video/x-raw", "format", G_TYPE_STRING, o.format.c_str(), nullptr);
  // No clock sync: the application takes frames as fast as they come.
  g_object_set(sink, "caps", caps, "sync", FALSE, "max-buffers", 4, nullptr);
  gst_caps_unref(caps);
  gst_bin_add_many(GST_BIN(pipeline), src, sink, nullptr);
  if (!gst_element_link(src, sink)) {
    std::fprintf(stderr, "h3-gst-app: cannot link h3videosrc to appsink with format %s\n", o.format.c_str());
    gst_object_unref(pipeline);
    return 2;
  }

  GstBus* bus = gst_element_get_bus(pipeline);
  BusState st;
  const gint64 t0 = g_get_monotonic_time();
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  long frames = 0;
  double first = -1, last = -1;
  GstClockTime last_pts = GST_CLOCK_TIME_NONE;
  for (;;) {
    GstSample* s = gst_app_sink_try_pull_sample(GST_APP_SINK(sink), 100 * GST_MSECOND);
    drain_bus(bus, t0, &st);
    if (s) {
      last = seconds_since(t0);
      if (frames == 0) {
        first = last;
        GstCaps* c = gst_sample_get_caps(s);
        gchar* str = gst_caps_to_string(c);
        std::printf("caps: %s\n", str);
        g_free(str);
      }
      last_pts = GST_BUFFER_PTS(gst_sample_get_buffer(s));
      ++frames;
      gst_sample_unref(s);
      continue;
    }
    if (st.error || gst_app_sink_is_eos(GST_APP_SINK(sink))) break;
  }
  // The engine's "done" may come just after EOS (it is posted from the engine's thread).
  for (int i = 0; i < 50 && st.done_at < 0 && !st.error; ++i) {
    drain_bus(bus, t0, &st);
    if (st.done_at < 0) g_usleep(20000);
  }
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(bus);
  gst_object_unref(pipeline);

  std::printf("frames: %ld\n", frames);
  std::printf("first frame at: %.3f s\n", first);
  std::printf("last frame at: %.3f s (pts %.3f s)\n", last,
              GST_CLOCK_TIME_IS_VALID(last_pts) ? static_cast<double>(last_pts) / GST_SECOND : -1.0);
  std::printf("engine done at: %.3f s\n", st.done_at);
  return st.error ? 1 : 0;
}
