// How an engine failure crosses the boundary: exceptions do not (see engine_module.h), so
// the engine module catches them and hands over the error's kind and message. The kind is
// core's own h3::ErrorKind, so the plugin chooses a GStreamer error domain from the same
// enum the engine throws, and names it with the same h3::to_string.
#pragma once

#include <string>

#include "h3/error.h"

namespace h3gst {

struct EngineFailure {
  h3::ErrorKind kind = h3::ErrorKind::kInternal;
  std::string message;
};

}  // namespace h3gst
