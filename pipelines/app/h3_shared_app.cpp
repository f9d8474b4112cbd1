// An application running two pipelines on ONE engine (docs/element.md, "One engine, many
// elements"): each pipeline is h3videosrc (a causal stream) into an appsink. The first pipeline's
// element opens the engine and offers it (GST_MESSAGE_HAVE_CONTEXT, "h3.engine"); the application
// keeps that context and answers the second pipeline's GST_MESSAGE_NEED_CONTEXT with it, as GL and
// CUDA applications hand their contexts around. While both play, it changes the first stream's
// prompt (the `prompt` property of a causal stream takes effect at its next chunk, and the element
// posts `h3-prompt-applied`).
//
// Usage: h3-shared-app [--frames N] [--change-at FRAME] [--model DIR]
// Prints each pipeline's frames, the model loads both pipelines reported (1: one engine), whether
// the second pipeline got the first's engine through the context, and the chunk the new prompt
// applied from. Exit status: 0 when both streams ended with EOS, 1 otherwise, 2 on bad usage.
#include <gst/app/gstappsink.h>
#include <gst/gst.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace {

struct Options {
  int frames = 73;
  int change_at = 20;  // the first stream's frame after which its prompt changes
  std::string model;
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (a == "--frames")
      o->frames = std::atoi(v);
    else if (a == "--change-at")
      o->change_at = std::atoi(v);
    else if (a == "--model")
      o->model = v;
    else
      return false;
  }
  return o->frames > 0 && o->change_at >= 0;
}

// What the application learns from both buses (sync handlers: called on the posting threads).
struct Shared {
  std::mutex m;
  GstContext* engine = nullptr;  // the first pipeline's "h3.engine" context
  bool handed_over = false;      // the second pipeline asked and was given it
  int loads = 0;                 // GstProgress "loading ..." of both pipelines
  long applied_chunk = -1;       // h3-prompt-applied of the first stream
  bool error = false;
};

GstBusSyncReply on_message(GstBus*, GstMessage* msg, gpointer data) {
  auto* s = static_cast<Shared*>(data);
  std::lock_guard<std::mutex> lk(s->m);
  switch (GST_MESSAGE_TYPE(msg)) {
    case GST_MESSAGE_HAVE_CONTEXT: {
      GstContext* c = nullptr;
      gst_message_parse_have_context(msg, &c);
      if (c && !s->engine && g_strcmp0(gst_context_get_context_type(c), "h3.engine") == 0) {
        s->engine = c;  // kept: handed to the second pipeline
      } else if (c) {
        gst_context_unref(c);
      }
      break;
    }
    case GST_MESSAGE_NEED_CONTEXT: {
      const gchar* type = nullptr;
      if (gst_message_parse_context_type(msg, &type) && g_strcmp0(type, "h3.engine") == 0 && s->engine) {
        gst_element_set_context(GST_ELEMENT(GST_MESSAGE_SRC(msg)), s->engine);
        s->handed_over = true;
      }
      break;
    }
    case GST_MESSAGE_PROGRESS: {
      GstProgressType type;
      gchar *code = nullptr, *text = nullptr;
      gst_message_parse_progress(msg, &type, &code, &text);
      if (type == GST_PROGRESS_TYPE_CONTINUE && text && g_str_has_prefix(text, "loading ")) ++s->loads;
      g_free(code);
      g_free(text);
      break;
    }
    case GST_MESSAGE_ELEMENT: {
      const GstStructure* st = gst_message_get_structure(msg);
      gint64 chunk = -1;
      if (gst_structure_has_name(st, "h3-prompt-applied") && gst_structure_get_int64(st, "chunk", &chunk) &&
          s->applied_chunk < 0)
        s->applied_chunk = chunk;
      break;
    }
    case GST_MESSAGE_ERROR: {
      GError* err = nullptr;
      gst_message_parse_error(msg, &err, nullptr);
      std::fprintf(stderr, "h3-shared-app: error from %s: %s\n", GST_OBJECT_NAME(GST_MESSAGE_SRC(msg)),
                   err->message);
      g_error_free(err);
      s->error = true;
      break;
    }
    default: break;
  }
  return GST_BUS_PASS;
}

struct Stream {
  GstElement* pipeline = nullptr;
  GstElement* src = nullptr;
  GstElement* sink = nullptr;
  long frames = 0;
  bool eos = false;
};

Stream make_stream(const char* name, const Options& o, const char* prompt, guint64 seed, Shared* shared) {
  Stream s;
  s.pipeline = gst_pipeline_new(name);
  s.src = gst_element_factory_make("h3videosrc", nullptr);
  s.sink = gst_element_factory_make("appsink", nullptr);
  if (!s.src || !s.sink) {
    std::fprintf(stderr, "h3-shared-app: h3videosrc or appsink is not available (is GST_PLUGIN_PATH set?)\n");
    std::exit(1);
  }
  gst_util_set_object_arg(G_OBJECT(s.src), "sampler", "causal");
  g_object_set(s.src, "num-frames", o.frames, "seed", seed, "prompt", prompt, nullptr);
  if (!o.model.empty()) g_object_set(s.src, "model", o.model.c_str(), nullptr);
  g_object_set(s.sink, "sync", FALSE, "max-buffers", 4, nullptr);
  gst_bin_add_many(GST_BIN(s.pipeline), s.src, s.sink, nullptr);
  gst_element_link(s.src, s.sink);
  GstBus* bus = gst_element_get_bus(s.pipeline);
  gst_bus_set_sync_handler(bus, on_message, shared, nullptr);
  gst_object_unref(bus);
  return s;
}

// Takes what the stream's appsink has (waiting at most 20 ms); false once it ended.
bool pull(Stream& s) {
  if (s.eos) return false;
  GstSample* sample = gst_app_sink_try_pull_sample(GST_APP_SINK(s.sink), 20 * GST_MSECOND);
  if (sample) {
    ++s.frames;
    gst_sample_unref(sample);
    return true;
  }
  if (gst_app_sink_is_eos(GST_APP_SINK(s.sink))) s.eos = true;
  return !s.eos;
}

}  // namespace

int main(int argc, char** argv) {
  gst_init(&argc, &argv);
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(stderr, "usage: h3-shared-app [--frames N] [--change-at FRAME] [--model DIR]\n");
    return 2;
  }
  Shared shared;
  Stream first = make_stream("first", o, "a red circle moving right on a black background", 1, &shared);
  Stream second = make_stream("second", o, "a green square moving left on a white background", 2, &shared);
  gst_element_set_state(first.pipeline, GST_STATE_PLAYING);
  // The second pipeline starts once the first offered its engine: its element then asks for one
  // (NEED_CONTEXT) and the application hands it the first's.
  for (;;) {
    {
      std::lock_guard<std::mutex> lk(shared.m);
      if (shared.engine || shared.error) break;
    }
    if (!pull(first)) break;
  }
  gst_element_set_state(second.pipeline, GST_STATE_PLAYING);
  bool changed = false;
  for (;;) {
    // The first stream is held at --change-at frames until the change is made: its consumer's
    // back-pressure keeps the engine within a few chunks of it, so the change lands mid-stream.
    const bool a = changed || first.frames < o.change_at ? pull(first) : !first.eos;
    const bool b = pull(second);
    if (!changed && first.frames >= o.change_at && second.frames > 0) {
      // Both play: the first stream takes a new prompt from its next chunk.
      g_object_set(first.src, "prompt", "a blue triangle moving down on a black background", nullptr);
      changed = true;
      std::printf("prompt changed after frame %ld of the first stream\n", first.frames);
    }
    {
      std::lock_guard<std::mutex> lk(shared.m);
      if (shared.error) break;
    }
    if (!a && !b) break;
  }
  gst_element_set_state(first.pipeline, GST_STATE_NULL);
  gst_element_set_state(second.pipeline, GST_STATE_NULL);
  std::lock_guard<std::mutex> lk(shared.m);
  std::printf("first: %ld frames\nsecond: %ld frames\n", first.frames, second.frames);
  std::printf("model loads: %d\n", shared.loads);
  std::printf("engine handed over through the context: %s\n", shared.handed_over ? "yes" : "no");
  std::printf("new prompt applied from chunk: %ld\n", shared.applied_chunk);
  if (shared.engine) gst_context_unref(shared.engine);
  gst_object_unref(first.pipeline);
  gst_object_unref(second.pipeline);
  return !shared.error && first.eos && second.eos ? 0 : 1;
}
