// The buffer pool of a video pad (h3videosrc's decide_allocation, h3src's video pad): the one
// downstream proposes, raised to a frame's size, or a GstVideoBufferPool of the element's own.
#pragma once

#include <gst/gst.h>

namespace h3gst {

// Sets the allocation `query`'s first pool: downstream's first (raised to a frame's size) or a
// new video pool, with GstVideoMeta when downstream offers it; false with an error posted on
// `element` when it cannot hold the frames.
bool decide_video_pool(GstElement* element, GstQuery* query);

}  // namespace h3gst
