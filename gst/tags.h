// The stream's tags: the global tag list both elements send once per stream before the first
// buffer, and the custom seed tag it carries.
#pragma once

#include <gst/gst.h>

#include "settings.h"

// The custom tag carrying the generation seed (G_TYPE_UINT64).
#define GST_H3_TAG_SEED "h3-seed"

namespace h3gst {

// Registers GST_H3_TAG_SEED; class_init of each element.
void register_tags();
// Global tags for a stream of `s`'s clip: title and comment (the prompt, or the embeddings
// file's name), encoder, seed.
GstTagList* stream_tags(const Settings& s);

}  // namespace h3gst
