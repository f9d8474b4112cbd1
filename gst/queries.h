// The answers the elements give to their pads' queries from what the lifecycle published (the
// plan once known, the rate): a pad's caps before and after negotiation, the stream's duration.
#pragma once

#include <gst/gst.h>

#include "lifecycle.h"

namespace h3gst {

// CAPS: the pad's current caps, or, not negotiated yet, its template narrowed to the plan once
// known; intersected with the query's filter.
void answer_caps(GstPad* pad, GstQuery* query, const Published& pub, bool video);

// h3videosrc's DURATION: the plan's frames (the num-frames property's until the plan is known),
// fewer when `num_buffers` (>= 0) says so; in time or in frames (GST_FORMAT_DEFAULT). False when
// not known (an endless stream before num-buffers bounds it) or asked in another format.
bool answer_frames_duration(GstQuery* query, const Published& pub, gint64 num_buffers);

// h3src's DURATION of its video or audio pad, in time: the plan's frames or samples, -1 (unknown)
// for an endless stream. False before the plan is known or in another format.
bool answer_pad_duration(GstQuery* query, const Published& pub, bool video);

}  // namespace h3gst
