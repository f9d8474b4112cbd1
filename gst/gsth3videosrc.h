// h3videosrc: a GstPushSrc that generates video with the H3 engine and pushes
// every decoded chunk's frames downstream as they are handed over.
#pragma once

#include <gst/base/gstpushsrc.h>
#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_H3_VIDEO_SRC (gst_h3_video_src_get_type())
G_DECLARE_FINAL_TYPE(GstH3VideoSrc, gst_h3_video_src, GST, H3_VIDEO_SRC, GstPushSrc)

GST_ELEMENT_REGISTER_DECLARE(h3videosrc);

G_END_DECLS
