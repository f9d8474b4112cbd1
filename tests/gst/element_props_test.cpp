// h3videosrc before any engine work: registration, properties, and the bad
// settings the element itself refuses. The engine module is pointed at a file
// that does not exist, so nothing here loads the engine (a missing module fails
// the state change itself); the engine's own failures are tested in
// element_errors_test.cpp.
#include <gst/gst.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "../temp_dir.h"
#include "gst_test_util.h"
#include "h3/limits.h"

namespace {

class NoEngine : public ::testing::Environment {
 public:
  void SetUp() override { setenv("H3_ENGINE_MODULE", "/nonexistent/libgsth3-engine.so", 1); }
};
const auto* const kNoEngine = ::testing::AddGlobalTestEnvironment(new NoEngine);

GstElement* parse(const char* launch) {
  GError* err = nullptr;
  GstElement* p = gst_parse_launch(launch, &err);
  EXPECT_EQ(err, nullptr) << (err ? err->message : "");
  if (err) g_error_free(err);
  return p;
}

TEST(H3VideoSrcElement, IsRegisteredAsAVideoSourceWithoutLoadingLibTorch) {
  GstElementFactory* f = gst_element_factory_find("h3videosrc");
  ASSERT_NE(f, nullptr) << "plugin not found on GST_PLUGIN_PATH_1_0";
  EXPECT_STREQ(gst_element_factory_get_metadata(f, GST_ELEMENT_METADATA_KLASS), "Source/Video");
  GstElement* e = gst_element_factory_create(f, "src");
  ASSERT_NE(e, nullptr);
  GstPlugin* plugin = gst_plugin_feature_get_plugin(GST_PLUGIN_FEATURE(f));
  ASSERT_NE(plugin, nullptr);
  EXPECT_STREQ(gst_plugin_get_name(plugin), "h3");
  EXPECT_TRUE(g_str_has_suffix(gst_plugin_get_filename(plugin), "/libgsth3.so"));
  gst_object_unref(plugin);
  // Loading the plugin and making the element must not pull LibTorch in.
  EXPECT_FALSE(h3test::library_mapped("libtorch"));
  EXPECT_FALSE(h3test::library_mapped("libc10"));
  gst_object_unref(e);
  gst_object_unref(f);
}

TEST(H3VideoSrcElement, EveryPropertyHasABlurbAndIsMutableInReadyOnly) {
  GstElement* e = gst_element_factory_make("h3videosrc", nullptr);
  ASSERT_NE(e, nullptr);
  guint n = 0;
  GParamSpec** specs = g_object_class_list_properties(G_OBJECT_GET_CLASS(e), &n);
  int own = 0;
  for (guint i = 0; i < n; ++i) {
    GParamSpec* ps = specs[i];
    if (ps->owner_type != G_OBJECT_TYPE(e)) continue;
    ++own;
    SCOPED_TRACE(ps->name);
    const gchar* blurb = g_param_spec_get_blurb(ps);
    ASSERT_NE(blurb, nullptr);
    EXPECT_GT(strlen(blurb), 20u);
    // The prompt alone may change while playing (a causal stream takes it at its next chunk).
    EXPECT_TRUE(ps->flags &
                (std::string(ps->name) == "prompt" ? GST_PARAM_MUTABLE_PLAYING : GST_PARAM_MUTABLE_READY));
    EXPECT_TRUE(ps->flags & G_PARAM_READWRITE);
  }
  g_free(specs);
  EXPECT_EQ(own, 36);
  for (const char* name : {"model",           "prompt",       "prompt-embeds", "seed",
                           "steps",           "width",        "height",        "num-frames",
                           "framerate",       "ranks",        "tp-size",       "device",
                           "queue-chunks",    "is-live",      "timeout",       "free-text-encoder",
                           "rendezvous",      "world-size",   "token-file",    "max-memory",
                           "sampler",         "lora",         "sink",          "window",
                           "prompt-timeline", "adaln-tables", "sp-size",       "device-memory",
                           "first-frame",     "last-frame",   "references",    "engine-group",
                           "positions",       "prompt-switch"}) {
    EXPECT_NE(g_object_class_find_property(G_OBJECT_GET_CLASS(e), name), nullptr) << name;
  }
  EXPECT_NE(g_object_class_find_property(G_OBJECT_GET_CLASS(e), "compute-dtype"), nullptr);
  EXPECT_NE(g_object_class_find_property(G_OBJECT_GET_CLASS(e), "pace"), nullptr);
  gst_object_unref(e);
}

// A value the element accepts is one the engine accepts: the property ranges are the engine's
// (include/h3/limits.h), with -1 for "the model's default" below them.
TEST(H3VideoSrcElement, PropertyRangesAreTheEnginesLimits) {
  GstElement* e = gst_element_factory_make("h3videosrc", nullptr);
  ASSERT_NE(e, nullptr);
  auto int_spec = [&](const char* name) {
    GParamSpec* ps = g_object_class_find_property(G_OBJECT_GET_CLASS(e), name);
    EXPECT_TRUE(ps && G_IS_PARAM_SPEC_INT(ps)) << name;
    return G_PARAM_SPEC_INT(ps);
  };
  for (const char* side : {"width", "height"}) {
    EXPECT_EQ(int_spec(side)->minimum, -1) << side;
    EXPECT_EQ(int_spec(side)->maximum, h3::kMaxSide) << side;
  }
  EXPECT_EQ(int_spec("num-frames")->minimum, -1);
  EXPECT_EQ(int_spec("num-frames")->maximum, h3::kMaxFrames);
  EXPECT_EQ(int_spec("steps")->minimum, -1);
  EXPECT_EQ(int_spec("steps")->maximum, h3::kMaxSteps);
  EXPECT_EQ(int_spec("ranks")->minimum, h3::kMinRanks);
  EXPECT_EQ(int_spec("ranks")->maximum, h3::kMaxRanks);
  EXPECT_EQ(int_spec("tp-size")->maximum, h3::kMaxRanks);
  EXPECT_EQ(int_spec("sink")->minimum, h3::kMinSink);
  EXPECT_EQ(int_spec("sink")->maximum, h3::kMaxSink);
  EXPECT_EQ(int_spec("sink")->default_value, h3::kDefaultSink);
  EXPECT_EQ(int_spec("window")->minimum, h3::kMinWindow);
  EXPECT_EQ(int_spec("window")->maximum, h3::kMaxWindow);
  EXPECT_EQ(int_spec("window")->default_value, h3::kDefaultWindow);
  GParamSpec* sampler = g_object_class_find_property(G_OBJECT_GET_CLASS(e), "sampler");
  ASSERT_TRUE(sampler && G_IS_PARAM_SPEC_ENUM(sampler));
  GEnumClass* values = G_PARAM_SPEC_ENUM(sampler)->enum_class;
  ASSERT_NE(g_enum_get_value_by_nick(values, "euler"), nullptr);
  ASSERT_NE(g_enum_get_value_by_nick(values, "causal"), nullptr);
  EXPECT_EQ(G_PARAM_SPEC_ENUM(sampler)->default_value, g_enum_get_value_by_nick(values, "euler")->value);
  GParamSpec* timeout = g_object_class_find_property(G_OBJECT_GET_CLASS(e), "timeout");
  ASSERT_TRUE(timeout && G_IS_PARAM_SPEC_UINT(timeout));
  EXPECT_EQ(G_PARAM_SPEC_UINT(timeout)->default_value, static_cast<guint>(h3::kDefaultTimeout.count()));
  // The engine's largest value is a valid setting.
  g_object_set(e, "num-frames", static_cast<gint>(h3::kMaxFrames), nullptr);
  gint frames = 0;
  g_object_get(e, "num-frames", &frames, nullptr);
  EXPECT_EQ(frames, h3::kMaxFrames);
  gst_object_unref(e);
}

TEST(H3VideoSrcElement, DefaultsAskForTheModelsOwnClipWithTheEmbeddedPrompt) {
  GstElement* e = gst_element_factory_make("h3videosrc", nullptr);
  ASSERT_NE(e, nullptr);
  gchar *model = nullptr, *prompt = nullptr, *device = nullptr;
  gint width = 0, height = 0, frames = 0, steps = 0, ranks = 0, tp = -1, queue = 0;
  guint64 seed = 1;
  gboolean live = TRUE;
  g_object_get(e, "model", &model, "prompt", &prompt, "device", &device, "width", &width, "height", &height,
               "num-frames", &frames, "steps", &steps, "ranks", &ranks, "tp-size", &tp, "queue-chunks",
               &queue, "seed", &seed, "is-live", &live, nullptr);
  EXPECT_EQ(model, nullptr);
  ASSERT_NE(prompt, nullptr);
  EXPECT_GT(strlen(prompt), 0u);
  EXPECT_STREQ(device, "cpu");
  EXPECT_EQ(width, -1);
  EXPECT_EQ(height, -1);
  EXPECT_EQ(frames, -1);
  EXPECT_EQ(steps, -1);
  EXPECT_EQ(ranks, 1);
  EXPECT_EQ(tp, 0);
  EXPECT_EQ(queue, 2);
  EXPECT_EQ(seed, 0u);
  EXPECT_FALSE(live);
  GValue fr = G_VALUE_INIT;
  g_value_init(&fr, GST_TYPE_FRACTION);
  g_object_get_property(G_OBJECT(e), "framerate", &fr);
  EXPECT_EQ(gst_value_get_fraction_numerator(&fr), 0);
  g_value_unset(&fr);
  g_free(model);
  g_free(prompt);
  g_free(device);
  gst_object_unref(e);
}

struct BadSetting {
  const char* launch;
  GQuark (*domain)();
  int code;
  const char* mentions;
};

class H3VideoSrcBadSetting : public ::testing::TestWithParam<BadSetting> {};

TEST_P(H3VideoSrcBadSetting, IsAnErrorOnTheBusNotACrash) {
  const BadSetting& b = GetParam();
  GstElement* p = parse(b.launch);
  ASSERT_NE(p, nullptr);
  const h3test::RunResult r = h3test::run_to_end(p, 60);
  EXPECT_TRUE(r.error);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.domain, b.domain()) << r.message;
  EXPECT_EQ(r.code, b.code) << r.message;
  EXPECT_NE(r.message.find(b.mentions), std::string::npos) << r.message;
  gst_object_unref(p);
}

INSTANTIATE_TEST_SUITE_P(
    Refused, H3VideoSrcBadSetting,
    ::testing::Values(BadSetting{"h3videosrc width=0 ! fakesink", gst_resource_error_quark,
                                 GST_RESOURCE_ERROR_SETTINGS, "width=0"},
                      BadSetting{"h3videosrc height=0 ! fakesink", gst_resource_error_quark,
                                 GST_RESOURCE_ERROR_SETTINGS, "height=0"},
                      BadSetting{"h3videosrc num-frames=0 ! fakesink", gst_resource_error_quark,
                                 GST_RESOURCE_ERROR_SETTINGS, "num-frames=0"},
                      BadSetting{"h3videosrc steps=0 ! fakesink", gst_resource_error_quark,
                                 GST_RESOURCE_ERROR_SETTINGS, "steps=0"},
                      BadSetting{"h3videosrc prompt=\"\" ! fakesink", gst_resource_error_quark,
                                 GST_RESOURCE_ERROR_SETTINGS, "prompt"},
                      BadSetting{"h3videosrc prompt-embeds=/nonexistent/e.safetensors ! fakesink",
                                 gst_resource_error_quark, GST_RESOURCE_ERROR_NOT_FOUND,
                                 "/nonexistent/e.safetensors"},
                      BadSetting{"h3videosrc ! fakesink", gst_library_error_quark, GST_LIBRARY_ERROR_INIT,
                                 "H3_ENGINE_MODULE"}));

// H3_ENGINE_MODULE set to a file that is there but is no module, for one test: the start passes
// the element's own checks, reaches PAUSED and fails on its worker when the file does not load.
class NotAModule {
 public:
  NotAModule() : dir_("gst-not-a-module") {
    const std::string path = dir_ / "libgsth3-engine.so";
    std::ofstream(path) << "not a shared library";
    setenv("H3_ENGINE_MODULE", path.c_str(), 1);
  }
  ~NotAModule() { setenv("H3_ENGINE_MODULE", "/nonexistent/libgsth3-engine.so", 1); }

 private:
  h3::test::TempDir dir_;
};

TEST(H3VideoSrcElement, AMissingEngineModuleFailsTheStateChangeItself) {
  // Not an error posted from the start's worker a moment later, which an application still on its
  // way to its bus loop could miss (gst-launch-1.0 then waited for the preroll forever).
  for (const char* launch : {"h3videosrc ! fakesink", "h3src name=s s.video ! fakesink s.audio ! fakesink"}) {
    SCOPED_TRACE(launch);
    GstElement* p = parse(launch);
    ASSERT_NE(p, nullptr);
    GstBus* bus = gst_element_get_bus(p);
    EXPECT_EQ(gst_element_set_state(p, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
    GstMessage* m = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR);  // posted before set_state returned
    ASSERT_NE(m, nullptr);
    GError* err = nullptr;
    gst_message_parse_error(m, &err, nullptr);
    EXPECT_EQ(err->domain, GST_LIBRARY_ERROR);
    EXPECT_NE(std::string(err->message).find("/nonexistent/libgsth3-engine.so: no such file"),
              std::string::npos)
        << err->message;
    g_error_free(err);
    gst_message_unref(m);
    gst_element_set_state(p, GST_STATE_NULL);
    gst_object_unref(bus);
    gst_object_unref(p);
  }
}

TEST(H3VideoSrcElement, APropertyChangedOutsideNullOrReadyIsRefusedWithAWarning) {
  const NotAModule not_a_module;
  GstElement* p = parse("h3videosrc name=src prompt=first ! fakesink");
  ASSERT_NE(p, nullptr);
  GstElement* src = h3test::by_name(p, "src");
  ASSERT_NE(src, nullptr);
  GstBus* bus = gst_element_get_bus(p);
  gst_element_set_state(p, GST_STATE_PAUSED);  // the source reaches PAUSED; its start fails later
  ASSERT_EQ(gst_element_get_state(src, nullptr, nullptr, 10 * GST_SECOND), GST_STATE_CHANGE_SUCCESS);
  g_object_set(src, "prompt", "second", nullptr);
  gchar* prompt = nullptr;
  g_object_get(src, "prompt", &prompt, nullptr);
  EXPECT_STREQ(prompt, "first");
  g_free(prompt);
  bool warned = false;
  while (GstMessage* m = gst_bus_pop_filtered(bus, GST_MESSAGE_WARNING)) {
    GError* err = nullptr;
    gst_message_parse_warning(m, &err, nullptr);
    warned = warned || std::string(err->message).find("'prompt'") != std::string::npos;
    g_error_free(err);
    gst_message_unref(m);
  }
  EXPECT_TRUE(warned);
  gst_element_set_state(p, GST_STATE_NULL);
  g_object_set(src, "prompt", "third", nullptr);  // accepted again once stopped
  g_object_get(src, "prompt", &prompt, nullptr);
  EXPECT_STREQ(prompt, "third");
  g_free(prompt);
  gst_object_unref(bus);
  gst_object_unref(src);
  gst_object_unref(p);
}

TEST(H3VideoSrcElement, AFailedStartCanBeRetriedFromReady) {
  GstElement* p = parse("h3videosrc ! fakesink");
  ASSERT_NE(p, nullptr);
  GstBus* bus = gst_element_get_bus(p);
  for (int i = 0; i < 3; ++i) {
    gst_element_set_state(p, GST_STATE_PAUSED);
    const h3test::RunResult r = h3test::wait_for_end(bus, 60);
    EXPECT_TRUE(r.error) << i;
    EXPECT_EQ(r.domain, GST_LIBRARY_ERROR) << i;
    EXPECT_EQ(gst_element_set_state(p, GST_STATE_READY), GST_STATE_CHANGE_SUCCESS) << i;
    gst_bus_set_flushing(bus, TRUE);
    gst_bus_set_flushing(bus, FALSE);
  }
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(bus);
  gst_object_unref(p);
}

TEST(H3VideoSrcElement, IsNotSeekableAndRefusesSeeks) {
  GstElement* src = gst_element_factory_make("h3videosrc", nullptr);
  ASSERT_NE(src, nullptr);
  EXPECT_FALSE(gst_element_seek_simple(src, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH, GST_SECOND));
  gst_object_unref(src);
}

}  // namespace
