// Where the engine module is looked for (the plugin's own folder, $H3_ENGINE_MODULE), and its
// opening (see engine_module.h), once per process.
#pragma once

#include <gst/gst.h>

#include <string>

#include "boundary/engine_module.h"

namespace h3gst {

// The folder of the plugin file `element` came from ("" when unknown): where the module is
// looked for beside it.
std::string plugin_dir_of(GstElement* element);

// Looks for the module, in order:
//   $H3_ENGINE_MODULE (a file),
//   <plugin_dir>/../gst-h3/libgsth3-engine.so   (installed: libdir/gstreamer-1.0 -> libdir/gst-h3),
//   <plugin_dir>/../gst-engine/libgsth3-engine.so (the build tree).
// The module stays resident once loaded (LibTorch cannot be unloaded safely).
// Returns nullptr with `error` saying what was tried and what to do.
const EngineModule* load_engine_module(const std::string& plugin_dir, std::string* error,
                                       std::string* loaded_from = nullptr);

// Whether the module is loaded, or a file is where load_engine_module looks first: a look at the
// folder, nothing loaded (the start asks before its worker loads the module, so that a missing
// module fails the state change itself). False with `error` worded as load_engine_module words it.
bool engine_module_present(const std::string& plugin_dir, std::string* error);

}  // namespace h3gst
