// The `h3-record` query (docs/element.md, "Marking"): custom, upstream, structure `h3-record`;
// h3src and h3videosrc answer it with their stream's record (field `record`, JSON), as it is at
// that moment (every prompt change so far). h3mark asks it through the muxer at EOS: the
// muxers, encoders and queues pass a query they do not know on upstream.
#pragma once

#include <gst/gst.h>

#include <string>

namespace h3gst {

// Asks upstream of `sinkpad`; true with the record in `json` when an element answered.
bool query_record(GstPad* sinkpad, std::string* json);
// Whether `query` is an h3-record query; an element with a record answers it (the field
// `record` set to `json`) and returns TRUE, one without lets it go on upstream.
bool is_record_query(GstQuery* query);
void answer_record_query(GstQuery* query, const std::string& json);

}  // namespace h3gst
