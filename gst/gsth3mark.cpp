// h3mark (gsth3mark.h). A passthrough of the muxer's bytes that follows where the muxer writes
// (its BYTES segments: mp4mux seeks back to fill in sizes) and, at EOS, writes one more box after
// the last byte of the file: ISO BMFF readers take top-level boxes in any order, so the boxes the
// muxer wrote keep their offsets. The record comes from the stream's own element, asked at EOS
// with the `h3-record` query (it then holds every prompt change), else from the `h3-record` tag
// the muxer collected (the stream's start only).
#include "gsth3mark.h"

#include <gst/gst.h>
#include <gst/gsttagsetter.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "h3/error.h"
#include "marking/xmp.h"
#include "marking_query.h"
#include "tags.h"

GST_DEBUG_CATEGORY_STATIC(gst_h3_mark_debug);
#define GST_CAT_DEFAULT gst_h3_mark_debug

struct _GstH3Mark {
  GstBaseTransform parent;
  // The streaming thread's alone (the sink pad's events and buffers).
  guint64 position;  // where the next buffer lands in the file
  guint64 end;       // the file's length so far
  gboolean written;  // the box went out (once per stream)
};

G_DEFINE_TYPE(GstH3Mark, gst_h3_mark, GST_TYPE_BASE_TRANSFORM);
GST_ELEMENT_REGISTER_DEFINE(h3mark, "h3mark", GST_RANK_NONE, GST_TYPE_H3_MARK);

static GstStaticPadTemplate sink_template =
    GST_STATIC_PAD_TEMPLATE("sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS("video/quicktime"));
static GstStaticPadTemplate src_template =
    GST_STATIC_PAD_TEMPLATE("src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS("video/quicktime"));

// The record from the stream's element (the query), else the tag the muxer upstream collected.
static bool find_record(GstH3Mark* self, std::string* json, const char** from) {
  GstBaseTransform* base = GST_BASE_TRANSFORM(self);
  if (h3gst::query_record(GST_BASE_TRANSFORM_SINK_PAD(base), json)) {
    *from = "the h3-record query";
    return true;
  }
  GstPad* peer = gst_pad_get_peer(GST_BASE_TRANSFORM_SINK_PAD(base));
  if (!peer) return false;
  GstElement* muxer = gst_pad_get_parent_element(peer);
  gst_object_unref(peer);
  bool found = false;
  if (muxer && GST_IS_TAG_SETTER(muxer)) {
    const GstTagList* tags = gst_tag_setter_get_tag_list(GST_TAG_SETTER(muxer));
    gchar* text = nullptr;
    if (tags && gst_tag_list_get_string(tags, GST_H3_TAG_RECORD, &text)) {
      *json = text;
      *from = "the muxer's h3-record tag";
      found = true;
    }
    g_free(text);
  }
  if (muxer) gst_object_unref(muxer);
  return found;
}

// At EOS: the box after the file's last byte. False (after an element error) when it could not
// be pushed.
static bool write_marking(GstH3Mark* self) {
  std::string json;
  const char* from = nullptr;
  if (!find_record(self, &json, &from)) {
    GST_ELEMENT_WARNING(self, STREAM, FORMAT, ("No h3 stream reached the muxer: the file is left unmarked"),
                        ("no element answered the h3-record query and the muxer has no h3-record tag; "
                         "h3mark marks what h3src or h3videosrc generated"));
    return true;
  }
  std::string box;
  try {
    box = h3::marking::xmp_uuid_box(h3::marking::to_xmp(h3::marking::record_from_json(json, "h3mark")));
  } catch (const h3::Error& e) {
    GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("Could not write the stream's marking"), ("%s", e.what()));
    return false;
  }
  GST_DEBUG_OBJECT(self, "record from %s; %zu-byte XMP box at byte %" G_GUINT64_FORMAT, from, box.size(),
                   self->end);
  GstSegment segment;
  gst_segment_init(&segment, GST_FORMAT_BYTES);
  segment.start = self->end;
  segment.position = self->end;
  GstPad* src = GST_BASE_TRANSFORM_SRC_PAD(GST_BASE_TRANSFORM(self));
  gst_pad_push_event(src, gst_event_new_segment(&segment));
  GstBuffer* buf = gst_buffer_new_memdup(box.data(), box.size());
  GST_BUFFER_OFFSET(buf) = self->end;
  const GstFlowReturn ret = gst_pad_push(src, buf);
  if (ret != GST_FLOW_OK) {
    GST_ELEMENT_ERROR(self, RESOURCE, WRITE, ("Could not write the stream's marking"),
                      ("pushing the XMP box returned %s", gst_flow_get_name(ret)));
    return false;
  }
  self->end += box.size();
  self->position = self->end;
  return true;
}

static gboolean gst_h3_mark_sink_event(GstBaseTransform* base, GstEvent* event) {
  GstH3Mark* self = GST_H3_MARK(base);
  switch (GST_EVENT_TYPE(event)) {
    case GST_EVENT_STREAM_START:
      self->position = self->end = 0;
      self->written = FALSE;
      break;
    case GST_EVENT_SEGMENT: {
      const GstSegment* segment = nullptr;
      gst_event_parse_segment(event, &segment);
      if (segment->format == GST_FORMAT_BYTES) self->position = segment->start;
      break;
    }
    case GST_EVENT_EOS:
      if (!self->written) {
        self->written = TRUE;
        if (!write_marking(self)) {
          gst_event_unref(event);
          return FALSE;
        }
      }
      break;
    default: break;
  }
  return GST_BASE_TRANSFORM_CLASS(gst_h3_mark_parent_class)->sink_event(base, event);
}

static GstFlowReturn gst_h3_mark_transform_ip(GstBaseTransform* base, GstBuffer* buf) {
  GstH3Mark* self = GST_H3_MARK(base);
  self->position += gst_buffer_get_size(buf);
  self->end = std::max(self->end, self->position);
  return GST_FLOW_OK;
}

static void gst_h3_mark_class_init(GstH3MarkClass* klass) {
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  GstBaseTransformClass* transform_class = GST_BASE_TRANSFORM_CLASS(klass);
  GST_DEBUG_CATEGORY_INIT(gst_h3_mark_debug, "h3mark", 0, "marks an MP4 of an H3 stream as generated");
  gst_element_class_set_static_metadata(
      element_class, "H3 marking", "Formatter/Metadata",
      "Appends the generated stream's marking (IPTC digital source type, AI system, model hash, prompts, "
      "seed, sampler) as XMP to the MP4 or QuickTime file of the muxer before it",
      "gst-h3 developers");
  gst_element_class_add_static_pad_template(element_class, &sink_template);
  gst_element_class_add_static_pad_template(element_class, &src_template);
  h3gst::register_tags();
  transform_class->sink_event = GST_DEBUG_FUNCPTR(gst_h3_mark_sink_event);
  transform_class->transform_ip = GST_DEBUG_FUNCPTR(gst_h3_mark_transform_ip);
  transform_class->passthrough_on_same_caps = TRUE;
}

static void gst_h3_mark_init(GstH3Mark* self) {
  gst_base_transform_set_passthrough(GST_BASE_TRANSFORM(self), TRUE);
  self->position = self->end = 0;
  self->written = FALSE;
}
