// Benchmark: h3videosrc ! fakesink against the engine alone, on the same
// request, in one process.
//  - frames/s: frames / (generation start -> last frame), for h3::Engine with a
//    sink that only counts, and for the element (generation start = its first
//    h3-progress message of the request; the model load is excluded from both:
//    the element's pipeline goes PLAYING -> READY -> PLAYING and keeps its engine).
//  - when the first buffer reaches the sink, against the end of denoising and the
//    end of the whole clip.
//  - --av 1: h3src instead (both pads into fakesinks; the engine alone then also decodes the
//    audio), and when the first audio buffer reached its sink against the first video buffer.
// Usage: h3-gst-bench [--frames N] [--width W] [--height H] [--steps S] [--seed S]
//                     [--model DIR] [--runs R] [--queue-chunks Q] [--av 0|1]
#include <ATen/ATen.h>
#include <gst/gst.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "engine/engine.h"
#include "h3/progress.h"
#include "h3/request.h"
#include "vae/chunk_sink.h"

namespace {

struct Options {
  int64_t frames = 49, width = 0, height = 0, steps = 0;
  uint64_t seed = 0;
  std::string model;
  int runs = 3, queue_chunks = 2;
  bool av = false;  // h3src with its audio pad, instead of h3videosrc
};

double now_s() {
  return static_cast<double>(g_get_monotonic_time()) / G_USEC_PER_SEC;
}

struct Timeline {
  double start = -1, denoise_end = -1, first = -1, last = -1;
  double first_audio = -1;  // --av: the first audio buffer at its sink
  int64_t frames = 0;
  double fps() const { return frames / (last - start); }
};

class CountingSink : public h3::ChunkSink {
 public:
  explicit CountingSink(Timeline* t) : t_(t) {}
  void on_chunk(const h3::Chunk& c) override {
    const double t = now_s();
    t_->last = t;
    if (!c.frames.defined()) return;  // a chunk's soundtrack stretch, after its frames
    if (t_->first < 0) t_->first = t;
    t_->frames += c.frames.size(0);
  }

 private:
  Timeline* t_;
};

Timeline run_engine(h3::Engine& engine, const h3::GenerationRequest& req) {
  Timeline t;
  CountingSink sink(&t);
  h3::StreamControl cancel;
  t.start = now_s();
  engine.generate(
      req, sink,
      [&](const h3::Progress& p) {
        if (p.phase == h3::Phase::kDecoding && t.denoise_end < 0) t.denoise_end = now_s();
      },
      cancel);
  return t;
}

struct ElementRun {
  std::mutex mutex;
  Timeline t;
};

GstBusSyncReply on_bus(GstBus*, GstMessage* m, gpointer data) {
  auto* run = static_cast<ElementRun*>(data);
  if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ELEMENT &&
      gst_structure_has_name(gst_message_get_structure(m), "h3-progress")) {
    const char* phase = gst_structure_get_string(gst_message_get_structure(m), "phase");
    std::lock_guard<std::mutex> lock(run->mutex);
    const double t = now_s();
    if (run->t.start < 0 && g_strcmp0(phase, "loading") != 0) run->t.start = t;
    if (run->t.denoise_end < 0 && g_strcmp0(phase, "decoding") == 0) run->t.denoise_end = t;
  }
  return GST_BUS_PASS;
}

void on_audio_handoff(GstElement*, GstBuffer*, GstPad*, gpointer data) {
  auto* run = static_cast<ElementRun*>(data);
  std::lock_guard<std::mutex> lock(run->mutex);
  if (run->t.first_audio < 0) run->t.first_audio = now_s();
}

// A buffer reaches a sink before it is rendered: in a non-live pipeline the first one waits in
// preroll until every sink of the pipeline has prerolled (both of h3src's, each on its own first
// data), so the first arrival is the earlier of the preroll and the render.
void on_preroll(GstElement*, GstBuffer*, GstPad*, gpointer data) {
  auto* run = static_cast<ElementRun*>(data);
  std::lock_guard<std::mutex> lock(run->mutex);
  if (run->t.first < 0) run->t.first = now_s();
}

void on_audio_preroll(GstElement*, GstBuffer*, GstPad*, gpointer data) {
  auto* run = static_cast<ElementRun*>(data);
  std::lock_guard<std::mutex> lock(run->mutex);
  if (run->t.first_audio < 0) run->t.first_audio = now_s();
}

void on_handoff(GstElement*, GstBuffer*, GstPad*, gpointer data) {
  auto* run = static_cast<ElementRun*>(data);
  std::lock_guard<std::mutex> lock(run->mutex);
  const double t = now_s();
  if (run->t.first < 0) run->t.first = t;
  run->t.last = t;
  ++run->t.frames;
}

bool run_element(GstElement* pipeline, ElementRun* run) {
  {
    std::lock_guard<std::mutex> lock(run->mutex);
    run->t = Timeline();
  }
  GstBus* bus = gst_element_get_bus(pipeline);
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  GstMessage* m = gst_bus_timed_pop_filtered(
      bus, 3600 * GST_SECOND, static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  bool ok = m && GST_MESSAGE_TYPE(m) == GST_MESSAGE_EOS;
  if (m && !ok) {
    GError* err = nullptr;
    gst_message_parse_error(m, &err, nullptr);
    std::fprintf(stderr, "h3-gst-bench: %s\n", err->message);
    g_error_free(err);
  }
  if (m) gst_message_unref(m);
  // READY keeps the element's engine open for the next run.
  gst_element_set_state(pipeline, GST_STATE_READY);
  gst_object_unref(bus);
  return ok;
}

void print(const char* what, const Timeline& t) {
  std::printf(
      "%-8s %3lld frames in %7.3f s = %7.2f frames/s | end of denoising %7.3f s, first frame %7.3f s, "
      "last frame %7.3f s\n",
      what, static_cast<long long>(t.frames), t.last - t.start, t.fps(), t.denoise_end - t.start,
      t.first - t.start, t.last - t.start);
}

}  // namespace

int main(int argc, char** argv) {
  gst_init(&argc, &argv);
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--frames")
      o.frames = std::atoll(v);
    else if (a == "--width")
      o.width = std::atoll(v);
    else if (a == "--height")
      o.height = std::atoll(v);
    else if (a == "--steps")
      o.steps = std::atoll(v);
    else if (a == "--seed")
      o.seed = std::strtoull(v, nullptr, 10);
    else if (a == "--model")
      o.model = v;
    else if (a == "--runs")
      o.runs = std::max(1, std::atoi(v));
    else if (a == "--queue-chunks")
      o.queue_chunks = std::atoi(v);
    else if (a == "--av")
      o.av = std::atoi(v) != 0;
    else {
      std::fprintf(stderr, "h3-gst-bench: unknown option %s\n", a.c_str());
      return 2;
    }
  }

  h3::EngineOptions eo;
  eo.model_dir = o.model.empty() ? h3::default_model_dir() : o.model;
  h3::GenerationRequest req;
  req.prompt = "a red circle moving right on a black background";  // both runs' (the launch line's)
  req.width = o.width;
  req.height = o.height;
  req.num_frames = o.frames;
  req.steps = o.steps;
  req.seed = o.seed;
  req.audio = o.av;

  std::printf(
      "request: %s, %lld frames, %s x %s, steps %s, seed %llu; best of %d alternating runs each (after one "
      "warm-up)\n",
      eo.model_dir.c_str(), static_cast<long long>(o.frames),
      o.width ? std::to_string(o.width).c_str() : "default",
      o.height ? std::to_string(o.height).c_str() : "default",
      o.steps ? std::to_string(o.steps).c_str() : "default", static_cast<unsigned long long>(o.seed), o.runs);

  std::string l = std::string(o.av ? "h3src" : "h3videosrc") + " name=src model=\"" + eo.model_dir +
                  "\" prompt=\"" + req.prompt + "\" num-frames=" + std::to_string(o.frames) +
                  " seed=" + std::to_string(o.seed) + " queue-chunks=" + std::to_string(o.queue_chunks);
  if (o.width) l += " width=" + std::to_string(o.width);
  if (o.height) l += " height=" + std::to_string(o.height);
  if (o.steps) l += " steps=" + std::to_string(o.steps);
  if (o.av)
    l += " src.video ! fakesink name=sink sync=false signal-handoffs=true"
         " src.audio ! fakesink name=asink sync=false signal-handoffs=true";
  else
    l += " ! fakesink name=sink sync=false signal-handoffs=true";
  GError* err = nullptr;
  GstElement* pipeline = gst_parse_launch(l.c_str(), &err);
  if (!pipeline || err) {
    std::fprintf(stderr, "h3-gst-bench: %s\n", err ? err->message : "cannot build the pipeline");
    return 1;
  }
  ElementRun run;
  GstElement* sink = gst_bin_get_by_name(GST_BIN(pipeline), "sink");
  g_signal_connect(sink, "handoff", G_CALLBACK(on_handoff), &run);
  g_signal_connect(sink, "preroll-handoff", G_CALLBACK(on_preroll), &run);
  gst_object_unref(sink);
  if (o.av) {
    GstElement* asink = gst_bin_get_by_name(GST_BIN(pipeline), "asink");
    g_signal_connect(asink, "handoff", G_CALLBACK(on_audio_handoff), &run);
    g_signal_connect(asink, "preroll-handoff", G_CALLBACK(on_audio_preroll), &run);
    gst_object_unref(asink);
  }
  GstBus* bus = gst_element_get_bus(pipeline);
  gst_bus_set_sync_handler(bus, on_bus, &run, nullptr);
  gst_object_unref(bus);

  // Runs alternate (engine, element, engine, ...) so that a load change on a
  // shared machine hits both alike; the best of each is kept.
  auto engine = h3::Engine::open(eo);
  run_engine(*engine, req);               // warm-up
  bool ok = run_element(pipeline, &run);  // warm-up, includes the element's model load
  Timeline best_engine, best_element;
  for (int r = 0; ok && r < o.runs; ++r) {
    const Timeline t = run_engine(*engine, req);
    if (best_engine.frames == 0 || t.fps() > best_engine.fps()) best_engine = t;
    ok = run_element(pipeline, &run);
    std::lock_guard<std::mutex> lock(run.mutex);
    if (best_element.frames == 0 || run.t.fps() > best_element.fps()) best_element = run.t;
  }
  engine.reset();
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(pipeline);
  if (!ok) return 1;

  print("engine", best_engine);
  print("element", best_element);
  std::printf("element / engine frames/s: %.3f (goal >= 0.98)\n", best_element.fps() / best_engine.fps());
  std::printf(
      "first buffer at the sink: %.3f s after generation start; %.3f s after the end of denoising; "
      "%.1f %% of the whole clip's time\n",
      best_element.first - best_element.start, best_element.first - best_element.denoise_end,
      100.0 * (best_element.first - best_element.start) / (best_element.last - best_element.start));
  if (o.av) {
    std::printf(
        "first audio buffer at its sink: %.3f s after generation start, %+.1f ms from the first video "
        "buffer\n",
        best_element.first_audio - best_element.start,
        1000.0 * (best_element.first_audio - best_element.first));
  }
  return 0;
}
