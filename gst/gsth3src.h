// h3src: one H3 generation with two source pads, `video` (what h3videosrc pushes) and
// `audio` (the soundtrack, decoded chunk by chunk beside the video), each driven by a task
// of its own from a bounded queue of its own.
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_H3_SRC (gst_h3_src_get_type())
G_DECLARE_FINAL_TYPE(GstH3Src, gst_h3_src, GST, H3_SRC, GstElement)

GST_ELEMENT_REGISTER_DECLARE(h3src);

G_END_DECLS
