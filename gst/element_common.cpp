#include "element_common.h"

#include <gst/video/video.h>

#include <algorithm>
#include <cmath>

#include "gsth3videosrc.h"

namespace h3gst {

void register_tags() {
  gst_tag_register(GST_H3_TAG_SEED, GST_TAG_FLAG_META, G_TYPE_UINT64, "h3 seed",
                   "seed of the H3 generation that made the stream", nullptr);
}

bool check_settings(GstElement* element, const Settings& s) {
  // The engine reads 0 as "the model's default"; the element spells that -1, so
  // an explicit 0 is a mistake to report, not a default to apply.
  if (const char* zero = explicit_zero(s)) {
    GST_ELEMENT_ERROR(
        element, RESOURCE, SETTINGS,
        ("Property %s=0 is not a valid request: set a positive value, or -1 for the model's default", zero),
        (nullptr));
    return false;
  }
  if (s.embeds.empty() && s.prompt.empty()) {
    GST_ELEMENT_ERROR(element, RESOURCE, SETTINGS,
                      ("No prompt: set prompt, or prompt-embeds to an embeddings file"), (nullptr));
    return false;
  }
  if (!s.embeds.empty() && !g_file_test(s.embeds.c_str(), G_FILE_TEST_IS_REGULAR)) {
    GST_ELEMENT_ERROR(
        element, RESOURCE, NOT_FOUND,
        ("prompt-embeds file '%s' does not exist: point prompt-embeds at an embeddings .safetensors "
         "file, or unset it to use the prompt",
         s.embeds.c_str()),
        (nullptr));
    return false;
  }
  return true;
}

std::string plugin_dir_of(GstElement* element) {
  std::string dir;
  GstElementFactory* factory = gst_element_get_factory(element);
  GstPlugin* plugin = factory ? gst_plugin_feature_get_plugin(GST_PLUGIN_FEATURE(factory)) : nullptr;
  if (plugin) {
    if (const gchar* file = gst_plugin_get_filename(plugin)) {
      gchar* d = g_path_get_dirname(file);
      dir = d;
      g_free(d);
    }
    gst_object_unref(plugin);
  }
  return dir;
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

GstCaps* planned_video_caps(GstCaps* caps, const h3::ClipPlan& plan, gint fps_n, gint fps_d) {
  caps = gst_caps_make_writable(caps);
  gst_caps_set_simple(caps, "width", G_TYPE_INT, static_cast<gint>(plan.width), "height", G_TYPE_INT,
                      static_cast<gint>(plan.height), "framerate", GST_TYPE_FRACTION, fps_n, fps_d,
                      "pixel-aspect-ratio", GST_TYPE_FRACTION, 1, 1, nullptr);
  return caps;
}

void fixate_video_caps(GstCaps* caps, const h3::ClipPlan& plan, gint fps_n, gint fps_d) {
  GstStructure* s = gst_caps_get_structure(caps, 0);
  gst_structure_fixate_field_nearest_int(s, "width", static_cast<gint>(plan.width));
  gst_structure_fixate_field_nearest_int(s, "height", static_cast<gint>(plan.height));
  gst_structure_fixate_field_nearest_fraction(s, "framerate", fps_n, fps_d);
  if (gst_structure_has_field(s, "pixel-aspect-ratio"))
    gst_structure_fixate_field_nearest_fraction(s, "pixel-aspect-ratio", 1, 1);
  else
    gst_structure_set(s, "pixel-aspect-ratio", GST_TYPE_FRACTION, 1, 1, nullptr);
  if (gst_structure_has_field(s, "interlace-mode"))
    gst_structure_fixate_field_string(s, "interlace-mode", "progressive");
  else
    gst_structure_set(s, "interlace-mode", G_TYPE_STRING, "progressive", nullptr);
  gst_structure_fixate_field_string(s, "format", "RGB");
  // The engine's pixels are sRGB; YUV output is converted with BT.709.
  const gchar* fmt = gst_structure_get_string(s, "format");
  const bool yuv = fmt && g_str_equal(fmt, "I420");
  if (!gst_structure_has_field(s, "colorimetry"))
    gst_structure_set(s, "colorimetry", G_TYPE_STRING, yuv ? "bt709" : "sRGB", nullptr);
  else
    gst_structure_fixate_field_string(s, "colorimetry", yuv ? "bt709" : "sRGB");
  if (yuv && !gst_structure_has_field(s, "chroma-site"))
    gst_structure_set(s, "chroma-site", G_TYPE_STRING, "mpeg2", nullptr);
}

void fixate_to_published(GstCaps* caps, const void* published) {
  const auto& pub = *static_cast<const Published*>(published);
  fixate_video_caps(caps, pub.plan, pub.fps_n, pub.fps_d);
}

void fixate_audio_f32(GstCaps* caps, const void*) {
  gst_structure_fixate_field_string(gst_caps_get_structure(caps, 0), "format", "F32LE");
}

GstCaps* planned_audio_caps(GstCaps* caps, const Published& pub) {
  caps = gst_caps_make_writable(caps);
  gst_caps_set_simple(caps, "rate", G_TYPE_INT, static_cast<gint>(pub.plan.audio_rate), nullptr);
  return caps;
}

void write_s16(const float* in, int64_t n, int16_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::clamp(in[i], -1.0f, 1.0f) * 32767.0f;
    out[i] = static_cast<int16_t>(std::lrintf(v));
  }
}

bool caps_match_plan(const GstVideoInfo& info, const Published& pub) {
  return pub.have_plan && GST_VIDEO_INFO_WIDTH(&info) == pub.plan.width &&
         GST_VIDEO_INFO_HEIGHT(&info) == pub.plan.height && GST_VIDEO_INFO_FPS_N(&info) == pub.fps_n &&
         GST_VIDEO_INFO_FPS_D(&info) == pub.fps_d && GST_VIDEO_INFO_PAR_N(&info) == 1 &&
         GST_VIDEO_INFO_PAR_D(&info) == 1 && !GST_VIDEO_INFO_IS_INTERLACED(&info);
}

bool decide_video_pool(GstElement* element, GstQuery* query) {
  GstCaps* caps = nullptr;
  gst_query_parse_allocation(query, &caps, nullptr);
  GstVideoInfo info;
  if (!caps || !gst_video_info_from_caps(&info, caps)) return false;

  GstBufferPool* pool = nullptr;
  guint size = 0, min = 0, max = 0;
  const bool update = gst_query_get_n_allocation_pools(query) > 0;
  if (update) gst_query_parse_nth_allocation_pool(query, 0, &pool, &size, &min, &max);
  size = MAX(size, static_cast<guint>(GST_VIDEO_INFO_SIZE(&info)));
  if (!pool) pool = gst_video_buffer_pool_new();

  GstStructure* config = gst_buffer_pool_get_config(pool);
  gst_buffer_pool_config_set_params(config, caps, size, min, max);
  if (gst_query_find_allocation_meta(query, GST_VIDEO_META_API_TYPE, nullptr))
    gst_buffer_pool_config_add_option(config, GST_BUFFER_POOL_OPTION_VIDEO_META);
  if (!gst_buffer_pool_set_config(pool, config)) {
    config = gst_buffer_pool_get_config(pool);
    if (!gst_buffer_pool_config_validate_params(config, caps, size, min, max)) {
      gst_structure_free(config);
      gst_object_unref(pool);
      GST_ELEMENT_ERROR(element, RESOURCE, SETTINGS,
                        ("Downstream's buffer pool cannot hold %s frames", GST_VIDEO_INFO_NAME(&info)),
                        (nullptr));
      return false;
    }
    gst_buffer_pool_set_config(pool, config);
  }
  if (update)
    gst_query_set_nth_allocation_pool(query, 0, pool, size, min, max);
  else
    gst_query_add_allocation_pool(query, pool, size, min, max);
  gst_object_unref(pool);
  return true;
}

}  // namespace h3gst
