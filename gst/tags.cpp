#include "tags.h"

#include <string>

namespace h3gst {

void register_tags() {
  gst_tag_register(GST_H3_TAG_SEED, GST_TAG_FLAG_META, G_TYPE_UINT64, "h3 seed",
                   "seed of the H3 generation that made the stream", nullptr);
}

GstTagList* stream_tags(const Settings& s) {
  GstTagList* tags = gst_tag_list_new_empty();
  std::string title = s.prompt;
  if (!s.embeds.empty()) {
    gchar* base = g_path_get_basename(s.embeds.c_str());
    title = std::string("prompt embeddings ") + base;
    g_free(base);
  }
  gst_tag_list_add(tags, GST_TAG_MERGE_REPLACE, GST_TAG_TITLE, title.c_str(), GST_TAG_COMMENT, title.c_str(),
                   GST_TAG_ENCODER, "gst-h3", GST_H3_TAG_SEED, static_cast<guint64>(s.seed), nullptr);
  gst_tag_list_set_scope(tags, GST_TAG_SCOPE_GLOBAL);
  return tags;
}

}  // namespace h3gst
