// The stream's tags: the global tag list both elements send once per stream before the first
// buffer (docs/element.md, "Marking"), and the custom tags it carries.
#pragma once

#include <gst/gst.h>

#include "marking/record.h"

// The custom tags (GST_TAG_FLAG_META). Muxers store none of them; h3mark writes them as XMP.
#define GST_H3_TAG_SEED "h3-seed"                                // G_TYPE_UINT64
#define GST_H3_TAG_DIGITAL_SOURCE_TYPE "h3-digital-source-type"  // string: IPTC's URI
#define GST_H3_TAG_MODEL "h3-model"                              // string: the model folder's name
#define GST_H3_TAG_MODEL_SHA256 "h3-model-sha256"                // string: marking/model_digest.h
#define GST_H3_TAG_SAMPLER "h3-sampler"                          // string: euler, causal
#define GST_H3_TAG_RECORD "h3-record"                            // string: the record, JSON

namespace h3gst {

// Registers the custom tags; class_init of each element.
void register_tags();
// Global tags for the stream `r` describes: title (the first prompt's first line, at most 255
// bytes, "…" when cut), comment (the whole prompt), encoder and application-name, and the
// custom tags above.
GstTagList* stream_tags(const h3::marking::Record& r);

}  // namespace h3gst
