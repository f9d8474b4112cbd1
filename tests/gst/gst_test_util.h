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

#include <condition_variable>
#include <functional>
#include <mutex>

namespace h3test {

// Records a pipeline's bus messages from the posting thread (a sync handler),
// with the monotonic time each was posted, so tests can order them against
// buffer arrivals and wait for a given phase.
// Holds the buffers that reach `pad` after the first `pass` (a blocking pad probe): downstream
// stops there for as long as the gate is closed, however fast or loaded the machine is, so that a
// test finds the element mid-clip by construction, not by pacing. open() lets everything through;
// a flush of the pad (a state change to READY) releases a held buffer as GStreamer does.
class Gate {
 public:
  Gate(GstPad* pad, int pass);
  ~Gate();
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  // Waits (at most `timeout_s`) until a buffer is held at the gate; whether one is.
  bool wait_until_holding(double timeout_s);
  void open();

 private:
  static GstPadProbeReturn on_buffer(GstPad* pad, GstPadProbeInfo* info, gpointer self);
  GstPad* pad_;
  gulong probe_ = 0;
  std::mutex m_;
  std::condition_variable cv_;
  int pass_, passed_ = 0;
  bool holding_ = false;
};

class BusRecorder {
 public:
  struct Progress {
    std::string phase;
    int step = 0, total_steps = 0, chunk = 0, total_chunks = 0, frames = 0, total_frames = 0;
    double elapsed_s = 0;  // the engine's time since the request started, when it posted the report
    gint64 at_us = 0;      // when the bus handed it to the test
  };
  explicit BusRecorder(GstElement* pipeline);
  ~BusRecorder();

  // Waits until `pred` holds (checked under the lock after every message) or
  // `timeout_s` passes; returns whether it holds.
  bool wait(const std::function<bool(const BusRecorder&)>& pred, double timeout_s);
  bool wait_for_phase(const std::string& phase, int min_chunk, double timeout_s);
  bool wait_for_end(double timeout_s);

  // Under the lock (from a predicate) or after the pipeline stopped.
  const std::vector<Progress>& progress() const { return progress_; }
  bool eos() const { return eos_; }
  bool error() const { return error_; }
  const std::string& error_message() const { return error_message_; }
  gint64 first_time(const std::string& phase) const;  // -1 when never seen
  void clear();

 private:
  static GstBusSyncReply on_message(GstBus* bus, GstMessage* m, gpointer self);
  GstBus* bus_;
  mutable std::mutex mutex_;
  std::condition_variable cond_;
  std::vector<Progress> progress_;
  bool eos_ = false, error_ = false;
  std::string error_message_;
};

}  // namespace h3test
