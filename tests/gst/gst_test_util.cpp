#include "gst_test_util.h"

#include <gtest/gtest.h>

#include <chrono>
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

namespace h3test {

BusRecorder::BusRecorder(GstElement* pipeline) : bus_(gst_element_get_bus(pipeline)) {
  gst_bus_set_sync_handler(bus_, &BusRecorder::on_message, this, nullptr);
}

BusRecorder::~BusRecorder() {
  gst_bus_set_sync_handler(bus_, nullptr, nullptr, nullptr);
  gst_object_unref(bus_);
}

GstBusSyncReply BusRecorder::on_message(GstBus*, GstMessage* m, gpointer data) {
  auto* self = static_cast<BusRecorder*>(data);
  {
    std::lock_guard<std::mutex> lock(self->mutex_);
    switch (GST_MESSAGE_TYPE(m)) {
      case GST_MESSAGE_EOS: self->eos_ = true; break;
      case GST_MESSAGE_ERROR: {
        GError* err = nullptr;
        gst_message_parse_error(m, &err, nullptr);
        if (!self->error_) self->error_message_ = err->message ? err->message : "";
        self->error_ = true;
        g_error_free(err);
        break;
      }
      case GST_MESSAGE_ELEMENT: {
        const GstStructure* s = gst_message_get_structure(m);
        if (s && gst_structure_has_name(s, "h3-progress")) {
          Progress p;
          const gchar* phase = gst_structure_get_string(s, "phase");
          p.phase = phase ? phase : "";
          gst_structure_get_int(s, "step", &p.step);
          gst_structure_get_int(s, "total-steps", &p.total_steps);
          gst_structure_get_int(s, "chunk", &p.chunk);
          gst_structure_get_int(s, "total-chunks", &p.total_chunks);
          gst_structure_get_int(s, "frames", &p.frames);
          gst_structure_get_int(s, "total-frames", &p.total_frames);
          gst_structure_get_double(s, "elapsed", &p.elapsed_s);
          p.at_us = g_get_monotonic_time();
          self->progress_.push_back(p);
        }
        break;
      }
      default: break;
    }
  }
  self->cond_.notify_all();
  gst_message_unref(m);
  return GST_BUS_DROP;
}

bool BusRecorder::wait(const std::function<bool(const BusRecorder&)>& pred, double timeout_s) {
  std::unique_lock<std::mutex> lock(mutex_);
  return cond_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return pred(*this); });
}

bool BusRecorder::wait_for_phase(const std::string& phase, int min_chunk, double timeout_s) {
  bool found = false;
  wait(
      [&](const BusRecorder& r) {
        for (const auto& p : r.progress_)
          if (p.phase == phase && p.chunk >= min_chunk) found = true;
        return found || r.error_ || r.eos_;
      },
      timeout_s);
  return found;
}

bool BusRecorder::wait_for_end(double timeout_s) {
  return wait([](const BusRecorder& r) { return r.eos_ || r.error_; }, timeout_s);
}

gint64 BusRecorder::first_time(const std::string& phase) const {
  for (const auto& p : progress_)
    if (p.phase == phase) return p.at_us;
  return -1;
}

void BusRecorder::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  progress_.clear();
  eos_ = error_ = false;
  error_message_.clear();
}

Gate::Gate(GstPad* pad, int pass) : pad_(GST_PAD(gst_object_ref(pad))), pass_(pass) {
  probe_ = gst_pad_add_probe(
      pad_, static_cast<GstPadProbeType>(GST_PAD_PROBE_TYPE_BLOCK | GST_PAD_PROBE_TYPE_BUFFER),
      &Gate::on_buffer, this, nullptr);
}

Gate::~Gate() {
  open();
  gst_object_unref(pad_);
}

GstPadProbeReturn Gate::on_buffer(GstPad*, GstPadProbeInfo*, gpointer self) {
  auto* g = static_cast<Gate*>(self);
  std::lock_guard<std::mutex> lock(g->m_);
  if (g->passed_ < g->pass_) {
    ++g->passed_;
    return GST_PAD_PROBE_PASS;
  }
  g->holding_ = true;
  g->cv_.notify_all();
  return GST_PAD_PROBE_OK;  // blocks the streaming thread until the probe goes or the pad flushes
}

bool Gate::wait_until_holding(double timeout_s) {
  std::unique_lock<std::mutex> lock(m_);
  return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return holding_; });
}

void Gate::open() {
  if (probe_ != 0) gst_pad_remove_probe(pad_, probe_);
  probe_ = 0;
}

}  // namespace h3test
