// One loaded engine shared by the elements of a process (docs/element.md, "One engine, many
// elements"). GstH3Engine, a GstObject, stands for the engine of one key (the engine options, the
// LoRA and the engine-group): elements whose keys are equal share it. It is opened (the model
// loaded) by the first element that needs it and closed when the last holder lets go: an element
// holds it from its start until READY -> NULL, and an application may hold it too (the object's
// `keep-open` property), so that it stays loaded between pipelines. The object itself holds no
// weights: a GstContext or a bin may keep it for as long as it likes.
//
// Elements find it two ways. Implicitly: a registry of this process gives every element the
// object of its key. The GStreamer way: a GstContext of type "h3.engine" carries the object
// (field "engine", GST_TYPE_H3_ENGINE), asked for and offered as GL and CUDA elements share theirs
// (GST_QUERY_CONTEXT downstream, then GST_MESSAGE_NEED_CONTEXT; GST_MESSAGE_HAVE_CONTEXT once an
// element has an engine), so that an application can hand one engine to elements in several
// pipelines. An element takes a context's engine only when its own key is the engine's; otherwise
// it says, in a debug line, which option differs, and uses the engine of its own key.
#pragma once

#include <gst/gst.h>

#include <functional>
#include <string>
#include <vector>

#include "boundary/engine_module.h"

G_BEGIN_DECLS
#define GST_TYPE_H3_ENGINE (gst_h3_engine_get_type())
G_DECLARE_FINAL_TYPE(GstH3Engine, gst_h3_engine, GST, H3_ENGINE, GstObject)
G_END_DECLS

namespace h3gst {

constexpr const char* kEngineContextType = "h3.engine";

// What an engine is shared by: elements whose keys are equal share one.
struct EngineKey {
  h3::EngineOptions options;  // model_dir resolved (the module's default model when unset)
  // The DiT's adapter: the requests in flight on one engine share its DiT, so elements with
  // different LoRAs keep engines of their own (the engine refuses a request whose LoRA differs
  // from the running requests').
  std::string lora;
  std::string group;  // the engine-group property: elements of different groups never share
};

// The property that differs between `a` and `b` first ("model", "ranks", ..., "lora",
// "engine-group"), or "" when the keys are equal.
std::string engine_key_difference(const EngineKey& a, const EngineKey& b);

// The process's engine object of `key` (a new reference; created, unopened, when there is none).
// `others` receives, for each other engine object of the process, which of its options differs.
GstH3Engine* engine_for_key(const EngineKey& key, std::vector<std::string>* others);

// Holds the engine open for one more holder: opens it on the calling thread when it is closed
// (`opening` first, loading progress to `on_progress`, *opened_here set), waits while another
// holder opens or closes it. False with `failure` set when opening failed (then nothing is held).
bool hold_engine(GstH3Engine* engine, const EngineModule& module, const h3::ProgressFn& on_progress,
                 const std::function<void()>& opening, EngineFailure* failure, bool* opened_here);
// One holder lets go; the last closes the engine (joins its ranks) on the calling thread.
void release_engine_hold(GstH3Engine* engine);

const EngineKey& engine_key(GstH3Engine* engine);
EngineHandle& engine_handle(GstH3Engine* engine);  // while held
// Elements started on the engine (between their start and stop): a change of a shared engine's
// options is refused while another one plays.
void engine_started(GstH3Engine* engine, bool started);
int engine_started_count(GstH3Engine* engine);

// A persistent "h3.engine" context carrying `engine` (a new reference to the context).
GstContext* engine_context_new(GstH3Engine* engine);
// The engine an "h3.engine" context carries (a new reference), or nullptr.
GstH3Engine* engine_from_context(const GstContext* context);

}  // namespace h3gst
