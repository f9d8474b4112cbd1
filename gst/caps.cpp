#include "caps.h"

namespace h3gst {

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

bool caps_match_plan(const GstVideoInfo& info, const h3::ClipPlan& plan, gint fps_n, gint fps_d) {
  return GST_VIDEO_INFO_WIDTH(&info) == plan.width && GST_VIDEO_INFO_HEIGHT(&info) == plan.height &&
         GST_VIDEO_INFO_FPS_N(&info) == fps_n && GST_VIDEO_INFO_FPS_D(&info) == fps_d &&
         GST_VIDEO_INFO_PAR_N(&info) == 1 && GST_VIDEO_INFO_PAR_D(&info) == 1 &&
         !GST_VIDEO_INFO_IS_INTERLACED(&info);
}

GstCaps* planned_audio_caps(GstCaps* caps, const h3::ClipPlan& plan) {
  caps = gst_caps_make_writable(caps);
  gst_caps_set_simple(caps, "rate", G_TYPE_INT, static_cast<gint>(plan.audio_rate), nullptr);
  return caps;
}

void fixate_audio_caps(GstCaps* caps) {
  gst_structure_fixate_field_string(gst_caps_get_structure(caps, 0), "format", "F32LE");
}

GstCaps* filter_caps(GstCaps* caps, GstCaps* filter) {
  if (!filter) return caps;
  GstCaps* out = gst_caps_intersect_full(filter, caps, GST_CAPS_INTERSECT_FIRST);
  gst_caps_unref(caps);
  return out;
}

}  // namespace h3gst
