#include "marking_query.h"

namespace h3gst {

static const char* const kRecordQuery = "h3-record";

bool query_record(GstPad* sinkpad, std::string* json) {
  GstQuery* query = gst_query_new_custom(GST_QUERY_CUSTOM, gst_structure_new_empty(kRecordQuery));
  bool found = false;
  if (gst_pad_peer_query(sinkpad, query)) {
    const gchar* record = gst_structure_get_string(gst_query_get_structure(query), "record");
    if (record) {
      *json = record;
      found = true;
    }
  }
  gst_query_unref(query);
  return found;
}

bool is_record_query(GstQuery* query) {
  if (GST_QUERY_TYPE(query) != GST_QUERY_CUSTOM) return false;
  const GstStructure* s = gst_query_get_structure(query);
  return s && gst_structure_has_name(s, kRecordQuery);
}

void answer_record_query(GstQuery* query, const std::string& json) {
  gst_structure_set(gst_query_writable_structure(query), "record", G_TYPE_STRING, json.c_str(), nullptr);
}

}  // namespace h3gst
