// h3mark: placed right after mp4mux or qtmux, it appends the generated stream's marking as a
// top-level XMP `uuid` box to the file the muxer writes (docs/element.md, "Marking"). The muxers
// write XMP only for the tags GStreamer's XMP writer maps (dc:title, xmp:CreatorTool, ...), none
// of IPTC's AI fields, so the packet is written here instead.
#pragma once

#include <gst/base/gstbasetransform.h>
#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_H3_MARK (gst_h3_mark_get_type())
G_DECLARE_FINAL_TYPE(GstH3Mark, gst_h3_mark, GST, H3_MARK, GstBaseTransform)

GST_ELEMENT_REGISTER_DECLARE(h3mark);

G_END_DECLS
