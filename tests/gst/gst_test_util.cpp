#include "gst_test_util.h"

#include <gtest/gtest.h>

#include <fstream>

namespace {
class GstEnv : public ::testing::Environment {
 public:
  void SetUp() override { gst_init(nullptr, nullptr); }
};
const auto* const kGstEnv = ::testing::AddGlobalTestEnvironment(new GstEnv);
}  // namespace

namespace h3test {

RunResult wait_for_end(GstBus* bus, double timeout_s, std::vector<GstMessage*>* keep) {
  RunResult r;
  const gint64 deadline = g_get_monotonic_time() + static_cast<gint64>(timeout_s * G_USEC_PER_SEC);
  for (;;) {
    const gint64 left = deadline - g_get_monotonic_time();
    if (left <= 0) {
      r.timed_out = true;
      return r;
    }
    GstMessage* m = gst_bus_timed_pop(bus, static_cast<GstClockTime>(left) * GST_USECOND);
    if (!m) continue;
    if (keep) keep->push_back(gst_message_ref(m));
    switch (GST_MESSAGE_TYPE(m)) {
      case GST_MESSAGE_EOS: r.eos = true; break;
      case GST_MESSAGE_ERROR: {
        GError* err = nullptr;
        gchar* dbg = nullptr;
        gst_message_parse_error(m, &err, &dbg);
        r.error = true;
        r.domain = err->domain;
        r.code = err->code;
        r.message = err->message ? err->message : "";
        r.debug = dbg ? dbg : "";
        g_error_free(err);
        g_free(dbg);
        break;
      }
      case GST_MESSAGE_WARNING: {
        GError* err = nullptr;
        gst_message_parse_warning(m, &err, nullptr);
        r.warnings.emplace_back(err->message ? err->message : "");
        g_error_free(err);
        break;
      }
      default: break;
    }
    const bool done = r.eos || r.error;
    gst_message_unref(m);
    if (done) return r;
  }
}

RunResult run_to_end(GstElement* pipeline, double timeout_s) {
  GstBus* bus = gst_element_get_bus(pipeline);
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  RunResult r = wait_for_end(bus, timeout_s);
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(bus);
  return r;
}

GstElement* by_name(GstElement* bin, const char* name) {
  return gst_bin_get_by_name(GST_BIN(bin), name);
}

bool library_mapped(const char* needle) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace h3test
