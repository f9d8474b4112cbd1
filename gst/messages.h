// The bus messages h3videosrc and h3src post for what the engine reports: element errors whose
// domain and code say what kind of fix is needed, GstProgress `open` messages while the engine
// loads, and `h3-progress` element messages; and the `h3-chunk` event h3videosrc sends downstream
// (docs/element.md).
#pragma once

#include <gst/gst.h>

#include <string>

#include "boundary/engine_failure.h"
#include "h3/progress.h"

namespace h3gst {

// An engine failure as an element error; `what` says what was being done.
void post_failure(GstElement* element, const EngineFailure& failure, const char* what);
// GstProgress `open`; `percent` >= 0 is written into the message.
void post_open_progress(GstElement* element, GstProgressType type, const gchar* text, gint percent = -1);
// `h3-progress`: the phase (h3::to_string) and the counts of `p`.
void post_h3_progress(GstElement* element, const h3::Progress& p);
// `h3-chunk`, serialized before a chunk's first frame `first_frame` of `total_frames` (-1: endless).
GstEvent* chunk_event(int64_t first_frame, int64_t total_frames);

}  // namespace h3gst
