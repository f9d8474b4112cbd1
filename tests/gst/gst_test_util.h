// Shared helpers of the h3videosrc tests: GStreamer set-up and bus handling.
#pragma once

#include <gst/gst.h>

#include <string>
#include <vector>

namespace h3test {

// What a pipeline run ended with.
struct RunResult {
  bool eos = false;
  bool error = false;
  bool timed_out = false;
  GQuark domain = 0;
  int code = 0;
  std::string message;  // the error's user text
  std::string debug;
  std::vector<std::string> warnings;
};

// Plays `pipeline` until EOS, an error or `timeout_s`, then sets it to NULL.
RunResult run_to_end(GstElement* pipeline, double timeout_s);

// Collects the messages a pipeline run posted (copies kept by the caller).
RunResult wait_for_end(GstBus* bus, double timeout_s, std::vector<GstMessage*>* keep = nullptr);

// The element `name` inside a bin (a new reference).
GstElement* by_name(GstElement* bin, const char* name);

// True when a shared object whose path contains `needle` is mapped into this process.
bool library_mapped(const char* needle);

}  // namespace h3test
