#include "messages.h"

namespace h3gst {

void post_failure(GstElement* element, const EngineFailure& failure, const char* what) {
  const gchar* msg = failure.message.c_str();
  const char* kind = h3::to_string(failure.kind);
  switch (failure.kind) {
    case h3::ErrorKind::kNotFound:
      GST_ELEMENT_ERROR(element, RESOURCE, NOT_FOUND, ("%s: %s", what, msg), ("engine error kind: %s", kind));
      break;
    case h3::ErrorKind::kFormat:
    case h3::ErrorKind::kMismatch:
      GST_ELEMENT_ERROR(element, RESOURCE, READ, ("%s: %s", what, msg), ("engine error kind: %s", kind));
      break;
    case h3::ErrorKind::kInvalidArgument:
      GST_ELEMENT_ERROR(element, RESOURCE, SETTINGS, ("%s: %s", what, msg), ("engine error kind: %s", kind));
      break;
    case h3::ErrorKind::kOutOfMemory:
      GST_ELEMENT_ERROR(element, RESOURCE, NO_SPACE_LEFT, ("%s: %s", what, msg),
                        ("engine error kind: %s", kind));
      break;
    case h3::ErrorKind::kDistributed:
      GST_ELEMENT_ERROR(element, LIBRARY, FAILED, ("%s: %s", what, msg), ("engine error kind: %s", kind));
      break;
    default:
      GST_ELEMENT_ERROR(element, STREAM, FAILED, ("%s: %s", what, msg), ("engine error kind: %s", kind));
      break;
  }
}

void post_open_progress(GstElement* element, GstProgressType type, const gchar* text, gint percent) {
  GstMessage* m = gst_message_new_progress(GST_OBJECT(element), type, "open", text);
  if (percent >= 0) {
    gst_structure_set(gst_message_writable_structure(m), "percent", G_TYPE_INT, percent, nullptr);
  }
  gst_element_post_message(element, m);
}

void post_h3_progress(GstElement* element, const h3::Progress& p) {
  GstStructure* s = gst_structure_new(
      "h3-progress", "phase", G_TYPE_STRING, h3::to_string(p.phase), "step", G_TYPE_INT,
      static_cast<gint>(p.step), "total-steps", G_TYPE_INT, static_cast<gint>(p.total_steps), "chunk",
      G_TYPE_INT, static_cast<gint>(p.chunk), "total-chunks", G_TYPE_INT, static_cast<gint>(p.total_chunks),
      "frames", G_TYPE_INT, static_cast<gint>(p.frames), "total-frames", G_TYPE_INT,
      static_cast<gint>(p.total_frames), "elapsed", G_TYPE_DOUBLE, p.elapsed_s, nullptr);
  gst_element_post_message(element, gst_message_new_element(GST_OBJECT(element), s));
}

GstEvent* chunk_event(int64_t first_frame, int64_t total_frames) {
  return gst_event_new_custom(GST_EVENT_CUSTOM_DOWNSTREAM,
                              gst_structure_new("h3-chunk", "first-frame", G_TYPE_INT64, first_frame,
                                                "total-frames", G_TYPE_INT64, total_frames, nullptr));
}

}  // namespace h3gst
