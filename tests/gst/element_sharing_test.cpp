// One engine, many elements (docs/element.md, "One engine, many elements"): elements of one
// process whose engine options agree share one loaded engine, opened by the first and closed when
// the last lets go; an "h3.engine" GstContext hands an engine to elements of other pipelines;
// options or engine-groups that differ give engines of their own (a debug line names the option);
// a stream's error, flush or NULL touches that stream only, each stream's frames are what it gives
// alone, and a shared engine's options cannot change while another element plays on it.
#include <dlfcn.h>
#include <gst/app/gstappsink.h>
#include <gst/gst.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "boundary/engine_module.h"
#include "gst_test_util.h"

namespace {

// The engine module the plugin opens (gst/engine_loader.cpp), opened here first from the same file,
// so that both hold the one copy: its count of the engines it opened is the count of model loads
// in this process.
const h3gst::EngineModule& engine_module() {
  static const h3gst::EngineModule* module = [] {
    void* so = dlopen(H3_ENGINE_MODULE_FILE, RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(so, nullptr) << H3_ENGINE_MODULE_FILE << ": " << dlerror();
    auto* entry = reinterpret_cast<const h3gst::EngineModule* (*)()>(
        so ? dlsym(so, h3gst::kEngineModuleSymbol) : nullptr);
    EXPECT_NE(entry, nullptr) << "no " << h3gst::kEngineModuleSymbol << " in " << H3_ENGINE_MODULE_FILE;
    const h3gst::EngineModule* m = entry ? entry() : nullptr;
    EXPECT_TRUE(m && m->abi == h3gst::kEngineModuleAbi);
    return m;
  }();
  if (!module) throw std::runtime_error("the engine module could not be opened");
  return *module;
}

// The engine object an "h3.engine" context carries (a new reference), or nullptr.
GObject* engine_of(const GstContext* c) {
  const GValue* v = c ? gst_structure_get_value(gst_context_get_structure(c), "engine") : nullptr;
  return v && G_VALUE_HOLDS_OBJECT(v) ? G_OBJECT(g_value_dup_object(v)) : nullptr;
}

// A pipeline of one h3videosrc (`src`) into an appsink (`out`) that keeps every frame's bytes, and
// what its bus said: the engine loads it started (GstProgress "loading ..."), its context messages,
// warnings, errors, EOS.
struct Pipe {
  explicit Pipe(const std::string& src_properties) {
    const std::string desc = "h3videosrc name=src " + src_properties +
                             " ! video/x-raw,format=RGB ! appsink name=out sync=false emit-signals=true";
    GError* err = nullptr;
    pipeline = gst_parse_launch(desc.c_str(), &err);
    EXPECT_EQ(err, nullptr) << (err ? err->message : "");
    src = h3test::by_name(pipeline, "src");
    GstElement* out = h3test::by_name(pipeline, "out");
    g_signal_connect(out, "new-sample", G_CALLBACK(&Pipe::on_sample), this);
    gst_object_unref(out);
    bus = gst_element_get_bus(pipeline);
    gst_bus_set_sync_handler(bus, &Pipe::on_message, this, nullptr);
  }
  ~Pipe() {
    gst_element_set_state(pipeline, GST_STATE_NULL);
    gst_bus_set_sync_handler(bus, nullptr, nullptr, nullptr);
    if (have_context) gst_context_unref(have_context);
    gst_object_unref(bus);
    gst_object_unref(src);
    gst_object_unref(pipeline);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;

  void play() { gst_element_set_state(pipeline, GST_STATE_PLAYING); }
  // Waits (a bound against a hang, not a measure) for EOS or an error.
  bool wait_end(double timeout_s = 600) {
    std::unique_lock<std::mutex> lk(m);
    return cv.wait_for(lk, std::chrono::duration<double>(timeout_s), [&] { return eos || error; });
  }
  bool run(double timeout_s = 600) {
    play();
    const bool ended = wait_end(timeout_s);
    gst_element_set_state(pipeline, GST_STATE_NULL);
    return ended && eos && !error;
  }
  // The engine object of the element's "h3.engine" context (a new reference), or nullptr.
  GObject* engine() const {
    GstContext* c = gst_element_get_context(src, "h3.engine");
    GObject* e = engine_of(c);
    if (c) gst_context_unref(c);
    return e;
  }

  static GstFlowReturn on_sample(GstAppSink* sink, gpointer data) {
    auto* self = static_cast<Pipe*>(data);
    GstSample* s = gst_app_sink_pull_sample(sink);
    GstBuffer* b = gst_sample_get_buffer(s);
    GstMapInfo map;
    gst_buffer_map(b, &map, GST_MAP_READ);
    {
      std::lock_guard<std::mutex> lk(self->m);
      self->bytes.insert(self->bytes.end(), map.data, map.data + map.size);
      ++self->frames;
    }
    gst_buffer_unmap(b, &map);
    gst_sample_unref(s);
    return GST_FLOW_OK;
  }

  static GstBusSyncReply on_message(GstBus*, GstMessage* msg, gpointer data) {
    auto* self = static_cast<Pipe*>(data);
    std::lock_guard<std::mutex> lk(self->m);
    switch (GST_MESSAGE_TYPE(msg)) {
      case GST_MESSAGE_PROGRESS: {
        GstProgressType type;
        gchar *code = nullptr, *text = nullptr;
        gst_message_parse_progress(msg, &type, &code, &text);
        if (type == GST_PROGRESS_TYPE_CONTINUE && text && g_str_has_prefix(text, "loading ")) ++self->loads;
        g_free(code);
        g_free(text);
        break;
      }
      case GST_MESSAGE_NEED_CONTEXT: {
        const gchar* type = nullptr;
        if (gst_message_parse_context_type(msg, &type) && g_strcmp0(type, "h3.engine") == 0)
          ++self->need_context;
        break;
      }
      case GST_MESSAGE_HAVE_CONTEXT: {
        GstContext* c = nullptr;
        gst_message_parse_have_context(msg, &c);
        if (c && g_strcmp0(gst_context_get_context_type(c), "h3.engine") == 0) {
          if (self->have_context) gst_context_unref(self->have_context);
          self->have_context = c;
        } else if (c) {
          gst_context_unref(c);
        }
        break;
      }
      case GST_MESSAGE_WARNING: {
        GError* e = nullptr;
        gst_message_parse_warning(msg, &e, nullptr);
        self->warnings.emplace_back(e->message);
        g_error_free(e);
        break;
      }
      case GST_MESSAGE_ERROR: {
        GError* e = nullptr;
        gst_message_parse_error(msg, &e, nullptr);
        // The first error: the element's own; GstBaseSrc's "Internal data stream error" follows it.
        if (!self->error) self->error_message = e->message;
        self->error = true;
        g_error_free(e);
        break;
      }
      case GST_MESSAGE_EOS: self->eos = true; break;
      default: break;
    }
    self->cv.notify_all();
    return GST_BUS_PASS;
  }

  GstElement* pipeline = nullptr;
  GstElement* src = nullptr;
  GstBus* bus = nullptr;
  std::mutex m;
  std::condition_variable cv;
  std::vector<uint8_t> bytes;
  int frames = 0;
  int loads = 0, need_context = 0;
  GstContext* have_context = nullptr;
  std::vector<std::string> warnings;
  bool eos = false, error = false;
  std::string error_message;
};

// Two clips of different prompts and seeds (and a third size), small enough to be quick.
const char* const kClipA = "prompt=\"a red kite\" seed=3 width=64 height=48 num-frames=39 steps=3";
const char* const kClipB = "prompt=\"a blue boat\" seed=4 width=80 height=48 num-frames=39 steps=3";

// Each clip alone (on an engine of its own): the bytes the shared runs must give.
const std::vector<uint8_t>& alone(const char* clip) {
  // A map: the references handed out stay valid as clips are added.
  static std::map<std::string, std::vector<uint8_t>> cache;
  const auto found = cache.find(clip);
  if (found != cache.end()) return found->second;
  Pipe p(clip);
  EXPECT_TRUE(p.run()) << p.error_message;
  EXPECT_EQ(p.frames, 39);
  EXPECT_FALSE(p.bytes.empty()) << clip;
  EXPECT_EQ(p.bytes.size() % 39, 0u) << clip;
  return cache.emplace(clip, p.bytes).first->second;
}

// Debug lines of the element's category, kept while a Capture lives.
class Capture {
 public:
  Capture() {
    gst_debug_set_threshold_for_name("h3videosrc", GST_LEVEL_DEBUG);
    gst_debug_add_log_function(&Capture::log, this, nullptr);
  }
  ~Capture() {
    gst_debug_remove_log_function_by_data(this);
    gst_debug_set_threshold_for_name("h3videosrc", GST_LEVEL_NONE);
  }
  bool saw(const std::string& needle) {
    std::lock_guard<std::mutex> lk(m_);
    for (const auto& l : lines_) {
      if (l.find(needle) != std::string::npos) return true;
    }
    return false;
  }

 private:
  static void log(GstDebugCategory* cat, GstDebugLevel, const gchar*, const gchar*, gint, GObject*,
                  GstDebugMessage* msg, gpointer data) {
    if (g_strcmp0(gst_debug_category_get_name(cat), "h3videosrc") != 0) return;
    auto* self = static_cast<Capture*>(data);
    std::lock_guard<std::mutex> lk(self->m_);
    self->lines_.emplace_back(gst_debug_message_get(msg));
  }
  std::mutex m_;
  std::vector<std::string> lines_;
};

TEST(H3EngineSharing, TwoElementsOfOnePipelineOpenOneEngineAndEachGivesItsFramesAlone) {
  const std::vector<uint8_t>& a_alone = alone(kClipA);
  const std::vector<uint8_t>& b_alone = alone(kClipB);
  const int64_t opened_before = engine_module().engines_opened();
  GError* err = nullptr;
  GstElement* pipeline = gst_parse_launch(
      (std::string("h3videosrc name=a ") + kClipA +
       " ! video/x-raw,format=RGB ! appsink name=outa sync=false emit-signals=true h3videosrc name=b " +
       kClipB + " ! video/x-raw,format=RGB ! appsink name=outb sync=false emit-signals=true")
          .c_str(),
      &err);
  ASSERT_EQ(err, nullptr);
  // The two branches' frames, and the bus, through two Pipe-like recorders on the one pipeline.
  struct Branch {
    std::mutex m;
    std::vector<uint8_t> bytes;
  } outa, outb;
  const auto collect = [](GstAppSink* sink, gpointer data) -> GstFlowReturn {
    auto* b = static_cast<Branch*>(data);
    GstSample* s = gst_app_sink_pull_sample(sink);
    GstMapInfo map;
    gst_buffer_map(gst_sample_get_buffer(s), &map, GST_MAP_READ);
    {
      std::lock_guard<std::mutex> lk(b->m);
      b->bytes.insert(b->bytes.end(), map.data, map.data + map.size);
    }
    gst_buffer_unmap(gst_sample_get_buffer(s), &map);
    gst_sample_unref(s);
    return GST_FLOW_OK;
  };
  GstElement* sa = h3test::by_name(pipeline, "outa");
  GstElement* sb = h3test::by_name(pipeline, "outb");
  g_signal_connect(sa, "new-sample", G_CALLBACK(+collect), &outa);
  g_signal_connect(sb, "new-sample", G_CALLBACK(+collect), &outb);
  GstBus* bus = gst_element_get_bus(pipeline);
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  std::vector<GstMessage*> kept;
  const h3test::RunResult r = h3test::wait_for_end(bus, 600, &kept);
  EXPECT_TRUE(r.eos && !r.error) << r.message;
  int loads = 0;
  for (GstMessage* m : kept) {
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_PROGRESS) {
      GstProgressType type;
      gchar *code = nullptr, *text = nullptr;
      gst_message_parse_progress(m, &type, &code, &text);
      if (type == GST_PROGRESS_TYPE_CONTINUE && g_str_has_prefix(text, "loading ")) ++loads;
      g_free(code);
      g_free(text);
    }
    gst_message_unref(m);
  }
  EXPECT_EQ(loads, 1) << "two elements of the same options loaded the model twice";
  EXPECT_EQ(engine_module().engines_opened() - opened_before, 1)
      << "the engine module opened another count of engines than the one both elements share";
  GstElement* a = h3test::by_name(pipeline, "a");
  GstElement* b = h3test::by_name(pipeline, "b");
  GstContext* ca = gst_element_get_context(a, "h3.engine");
  GstContext* cb = gst_element_get_context(b, "h3.engine");
  ASSERT_TRUE(ca && cb);
  GObject* ea = engine_of(ca);
  GObject* eb = engine_of(cb);
  ASSERT_TRUE(ea && eb);
  EXPECT_EQ(ea, eb) << "the two elements hold different engines";
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gboolean open = TRUE;
  g_object_get(ea, "open", &open, nullptr);
  EXPECT_FALSE(open) << "the last element let go at NULL: the engine must be closed";
  EXPECT_EQ(outa.bytes.size(), 39u * 64 * 48 * 3);
  EXPECT_EQ(outb.bytes.size(), 39u * 80 * 48 * 3);
  EXPECT_TRUE(outa.bytes == a_alone) << "a's frames beside b are not its frames alone";
  EXPECT_TRUE(outb.bytes == b_alone) << "b's frames beside a are not its frames alone";
  g_object_unref(ea);
  g_object_unref(eb);
  gst_context_unref(ca);
  gst_context_unref(cb);
  gst_object_unref(a);
  gst_object_unref(b);
  gst_object_unref(sa);
  gst_object_unref(sb);
  gst_object_unref(bus);
  gst_object_unref(pipeline);
}

TEST(H3EngineSharing, AnOptionOrAnEngineGroupThatDiffersGivesAnEngineOfItsOwnAndADebugLineNamesIt) {
  Capture debug;
  const int64_t opened_before = engine_module().engines_opened();
  Pipe a(std::string(kClipA) + " timeout=100");
  Pipe b(std::string(kClipB) + " timeout=101");
  a.play();
  b.play();
  ASSERT_TRUE(a.wait_end() && b.wait_end());
  EXPECT_EQ(a.loads + b.loads, 2);
  EXPECT_EQ(engine_module().engines_opened() - opened_before, 2);
  EXPECT_TRUE(debug.saw("its option 'timeout' differs")) << "no debug line names the option";
  gst_element_set_state(a.pipeline, GST_STATE_NULL);
  gst_element_set_state(b.pipeline, GST_STATE_NULL);
  Pipe c(std::string(kClipA) + " engine-group=left");
  Pipe d(std::string(kClipB) + " engine-group=right");
  c.play();
  d.play();
  ASSERT_TRUE(c.wait_end() && d.wait_end());
  EXPECT_EQ(c.loads + d.loads, 2);
  EXPECT_TRUE(debug.saw("its option 'engine-group' differs"));
}

TEST(H3EngineSharing, AnApplicationHandsOnePipelinesEngineToAnotherThroughTheContextAndKeepsItOpen) {
  Pipe first(kClipA);
  ASSERT_TRUE(first.run()) << first.error_message;
  EXPECT_EQ(first.loads, 1);
  ASSERT_NE(first.have_context, nullptr) << "the element did not offer its engine (HAVE_CONTEXT)";
  GstContext* context = gst_context_ref(first.have_context);
  GObject* engine = engine_of(context);
  ASSERT_NE(engine, nullptr);
  gboolean open = TRUE;
  g_object_get(engine, "open", &open, nullptr);
  EXPECT_FALSE(open) << "nobody held it after the first pipeline's NULL: it closed";

  // Held by the application, it stays loaded between pipelines.
  g_object_set(engine, "keep-open", TRUE, nullptr);
  Pipe second(kClipB);
  gst_element_set_context(second.pipeline, context);
  {
    Capture debug;
    ASSERT_TRUE(second.run()) << second.error_message;
    // The same engine would come from the process's registry too: the element says it took the
    // context's.
    EXPECT_TRUE(debug.saw("using the engine of the h3.engine context"));
  }
  EXPECT_EQ(second.loads, 1) << "the held engine was closed: the second pipeline loaded it";
  EXPECT_EQ(second.need_context, 0) << "the element asked for a context it had been given";
  GObject* used = second.engine();
  EXPECT_EQ(used, engine) << "the second pipeline's element does not use the context's engine";
  if (used) g_object_unref(used);
  g_object_get(engine, "open", &open, nullptr);
  EXPECT_TRUE(open) << "keep-open: the engine stays loaded after the second pipeline's NULL";

  Pipe third(kClipA);
  gst_element_set_context(third.pipeline, context);
  ASSERT_TRUE(third.run()) << third.error_message;
  EXPECT_EQ(third.loads, 0) << "the third pipeline loaded the model although the application held it";
  EXPECT_TRUE(third.bytes == alone(kClipA));

  g_object_set(engine, "keep-open", FALSE, nullptr);
  g_object_get(engine, "open", &open, nullptr);
  EXPECT_FALSE(open) << "the application let go last: the engine must be closed";
  g_object_unref(engine);
  gst_context_unref(context);
}

// An engine whose options differ from the element's is not used, whatever the context says.
TEST(H3EngineSharing, AContextsEngineOfOtherOptionsIsNotUsed) {
  Capture debug;
  Pipe first(kClipA);
  ASSERT_TRUE(first.run());
  GstContext* context = gst_context_ref(first.have_context);
  Pipe other(std::string(kClipB) + " engine-group=apart");
  gst_element_set_context(other.pipeline, context);
  ASSERT_TRUE(other.run()) << other.error_message;
  EXPECT_EQ(other.loads, 1);
  EXPECT_TRUE(debug.saw("not using the h3.engine context's engine: its option 'engine-group' differs"));
  gst_context_unref(context);
}

// Two pipelines on one engine: a stream whose request fails (a malformed embeddings file, found
// only when the engine reads it), and one flushed mid-clip, touch the other stream not at all.
TEST(H3EngineSharing, AnErrorAndAFlushOfOneStreamLeaveTheOtherStreamsFramesAsTheyAreAlone) {
  const std::vector<uint8_t>& b_alone = alone(kClipB);
  const std::string bad = std::string(g_get_tmp_dir()) + "/h3-sharing-bad-embeds.safetensors";
  std::ofstream(bad) << "not a safetensors file";
  {
    Pipe failing(std::string(kClipA) + " prompt-embeds=" + bad);
    Pipe b(kClipB);
    // b holds its first frame until the failing stream has failed.
    GstPad* pad = gst_element_get_static_pad(b.src, "src");
    auto gate = std::make_unique<h3test::Gate>(pad, 0);
    b.play();
    ASSERT_TRUE(gate->wait_until_holding(300));
    failing.play();
    ASSERT_TRUE(failing.wait_end(300));
    EXPECT_TRUE(failing.error);
    EXPECT_NE(failing.error_message.find("h3-sharing-bad-embeds"), std::string::npos)
        << failing.error_message;
    gate->open();
    ASSERT_TRUE(b.wait_end());
    EXPECT_TRUE(b.eos && !b.error) << b.error_message;
    EXPECT_TRUE(b.bytes == b_alone) << "the other stream's frames changed";
    gst_element_set_state(b.pipeline, GST_STATE_NULL);
    gate.reset();
    gst_object_unref(pad);
  }
  std::remove(bad.c_str());
  {
    Pipe flushed(kClipA);
    Pipe b(kClipB);
    GstPad* pad = gst_element_get_static_pad(b.src, "src");
    auto gate = std::make_unique<h3test::Gate>(pad, 0);
    GstPad* fpad = gst_element_get_static_pad(flushed.src, "src");
    auto fgate = std::make_unique<h3test::Gate>(fpad, 5);
    b.play();
    flushed.play();
    ASSERT_TRUE(gate->wait_until_holding(300));
    ASSERT_TRUE(fgate->wait_until_holding(300));  // the flushed stream is mid-clip
    gst_element_send_event(flushed.src, gst_event_new_flush_start());
    gst_element_send_event(flushed.src, gst_event_new_flush_stop(TRUE));
    fgate->open();
    gate->open();
    ASSERT_TRUE(b.wait_end());
    EXPECT_TRUE(b.bytes == b_alone) << "the other stream's frames changed";
    ASSERT_TRUE(flushed.wait_end());
    EXPECT_TRUE(flushed.eos && !flushed.error) << flushed.error_message;
    gst_element_set_state(b.pipeline, GST_STATE_NULL);
    gst_element_set_state(flushed.pipeline, GST_STATE_NULL);
    gate.reset();
    fgate.reset();
    gst_object_unref(pad);
    gst_object_unref(fpad);
  }
}

// An element set to NULL mid-chunk lets its session go at the next chunk boundary: when its state
// change returns, the engine runs only the other element's request, which goes on as alone.
TEST(H3EngineSharing, AnElementSetToNullMidChunkFreesItsRequestAndTheOtherGoesOn) {
  const std::vector<uint8_t>& b_alone = alone(kClipB);
  Pipe stopped(kClipA);
  Pipe b(kClipB);
  GstPad* pad = gst_element_get_static_pad(b.src, "src");
  auto gate = std::make_unique<h3test::Gate>(pad, 0);
  GstPad* spad = gst_element_get_static_pad(stopped.src, "src");
  auto sgate = std::make_unique<h3test::Gate>(spad, 1);
  b.play();
  stopped.play();
  ASSERT_TRUE(gate->wait_until_holding(300));
  ASSERT_TRUE(sgate->wait_until_holding(300));
  GObject* engine = b.engine();
  ASSERT_NE(engine, nullptr);
  int requests = 0;
  g_object_get(engine, "requests", &requests, nullptr);
  EXPECT_EQ(requests, 2);
  gst_element_set_state(stopped.pipeline, GST_STATE_NULL);
  g_object_get(engine, "requests", &requests, nullptr);
  EXPECT_EQ(requests, 1) << "the stopped element's request is still in the engine";
  gate->open();
  ASSERT_TRUE(b.wait_end());
  EXPECT_TRUE(b.eos && !b.error) << b.error_message;
  EXPECT_TRUE(b.bytes == b_alone);
  gst_element_set_state(b.pipeline, GST_STATE_NULL);
  g_object_unref(engine);
  gate.reset();
  sgate.reset();
  gst_object_unref(pad);
  gst_object_unref(spad);
}

// An element that played and went to READY still holds the shared engine; while another element
// plays on it, a change of its engine options is refused, naming the property.
TEST(H3EngineSharing, AnEngineOptionChangedWhileAnotherElementPlaysOnTheSharedEngineIsRefused) {
  Pipe holder(kClipA);
  holder.play();
  ASSERT_TRUE(holder.wait_end());
  gst_element_set_state(holder.pipeline, GST_STATE_READY);  // keeps its engine across READY
  Pipe b(kClipB);
  GstPad* pad = gst_element_get_static_pad(b.src, "src");
  auto gate = std::make_unique<h3test::Gate>(pad, 0);
  b.play();
  ASSERT_TRUE(gate->wait_until_holding(300));
  g_object_set(holder.src, "ranks", 2, nullptr);
  gint ranks = 0;
  g_object_get(holder.src, "ranks", &ranks, nullptr);
  EXPECT_EQ(ranks, 1) << "the change went through";
  {
    std::lock_guard<std::mutex> lk(holder.m);
    ASSERT_FALSE(holder.warnings.empty());
    EXPECT_EQ(
        holder.warnings.back(),
        "Property 'ranks' is an option of the engine this element shares with 1 other playing element(s); "
        "the change is refused");
  }
  gate->open();
  ASSERT_TRUE(b.wait_end());
  gst_element_set_state(b.pipeline, GST_STATE_NULL);
  // Nobody else plays on it now: the change is taken (the next start opens another engine).
  g_object_set(holder.src, "ranks", 2, nullptr);
  g_object_get(holder.src, "ranks", &ranks, nullptr);
  EXPECT_EQ(ranks, 2);
  gate.reset();
  gst_object_unref(pad);
}

}  // namespace
