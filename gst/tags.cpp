#include "tags.h"

#include <string>

namespace h3gst {

void register_tags() {
  gst_tag_register(GST_H3_TAG_SEED, GST_TAG_FLAG_META, G_TYPE_UINT64, "h3 seed",
                   "seed of the H3 generation that made the stream", nullptr);
  gst_tag_register(
      GST_H3_TAG_DIGITAL_SOURCE_TYPE, GST_TAG_FLAG_META, G_TYPE_STRING, "digital source type",
      "IPTC digital source type of the stream (a URI of cv.iptc.org/newscodes/digitalsourcetype)", nullptr);
  gst_tag_register(GST_H3_TAG_MODEL, GST_TAG_FLAG_META, G_TYPE_STRING, "h3 model",
                   "name of the model folder that generated the stream", nullptr);
  gst_tag_register(GST_H3_TAG_MODEL_SHA256, GST_TAG_FLAG_META, G_TYPE_STRING, "h3 model sha256",
                   "SHA-256 over the model's safetensors files (docs/element.md, Marking)", nullptr);
  gst_tag_register(GST_H3_TAG_SAMPLER, GST_TAG_FLAG_META, G_TYPE_STRING, "h3 sampler",
                   "sampler of the H3 generation (euler, causal)", nullptr);
  gst_tag_register(GST_H3_TAG_RECORD, GST_TAG_FLAG_META, G_TYPE_STRING, "h3 record",
                   "everything that made the stream, as JSON (what h3 replay reads)", nullptr);
}

GstTagList* stream_tags(const h3::marking::Record& r) {
  const std::string prompt = r.prompt.empty() ? "prompt embeddings " + r.prompt_embeds : r.prompt;
  const std::string title = h3::marking::one_line(prompt, 255);
  const std::string application = r.generator + " " + r.element;
  const std::string json = h3::marking::to_json(r);
  GstTagList* tags = gst_tag_list_new_empty();
  gst_tag_list_add(tags, GST_TAG_MERGE_REPLACE, GST_TAG_TITLE, title.c_str(), GST_TAG_COMMENT, prompt.c_str(),
                   GST_TAG_ENCODER, "gst-h3", GST_TAG_APPLICATION_NAME, application.c_str(), GST_H3_TAG_SEED,
                   static_cast<guint64>(r.seed), GST_H3_TAG_DIGITAL_SOURCE_TYPE,
                   h3::marking::kDigitalSourceType, GST_H3_TAG_MODEL, r.model_name.c_str(),
                   GST_H3_TAG_MODEL_SHA256, r.model_sha256.c_str(), GST_H3_TAG_SAMPLER, r.sampler.c_str(),
                   GST_H3_TAG_RECORD, json.c_str(), nullptr);
  gst_tag_list_set_scope(tags, GST_TAG_SCOPE_GLOBAL);
  return tags;
}

}  // namespace h3gst
