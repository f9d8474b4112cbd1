// The bus messages h3videosrc posts for what the engine reports: element errors
// whose domain and code say what kind of fix is needed, GstProgress `open`
// messages while the engine loads, and `h3-progress` element messages
// (docs/element.md).
#pragma once

#include <gst/gst.h>

#include <string>

#include "boundary/failure.h"
#include "engine/progress.h"
#include "generation.h"

namespace h3src {

// An engine failure as an element error; `what` says what was being done.
void post_failure(GstElement* element, const h3gst::Failure& failure, const char* what);
// GstProgress `open`; `percent` >= 0 is written into the message.
void post_open_progress(GstElement* element, GstProgressType type, const gchar* text, gint percent = -1);
// `h3-progress`: the phase (h3::to_string) and the counts of `p`.
void post_h3_progress(GstElement* element, const h3::Progress& p);

// The generation's steps that h3videosrc and h3src report alike: the module or the start
// failing (an element error and GstProgress `error`), opening and planned (GstProgress
// `open`), the engine's progress (`h3-progress`). Each element adds what its start needs.
class PostingObserver : public Generation::Observer {
 public:
  explicit PostingObserver(GstElement* element) : element_(element) {}
  void module_missing(const std::string& error) override;
  void opening(const h3::EngineOptions& options) override;
  void start_failed(const h3gst::Failure& failure, const char* what) override;
  void planned(const h3::ClipPlan& plan) override;
  void progress(const h3::Progress& progress) override;

 protected:
  GstElement* element() const { return element_; }

 private:
  GstElement* element_;
};

}  // namespace h3src
