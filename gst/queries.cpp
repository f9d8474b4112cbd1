#include "queries.h"

#include "caps.h"

namespace h3gst {

void answer_caps(GstPad* pad, GstQuery* query, const Published& pub, bool video) {
  GstCaps* filter = nullptr;
  gst_query_parse_caps(query, &filter);
  GstCaps* caps = gst_pad_get_current_caps(pad);
  if (!caps) {
    caps = gst_pad_get_pad_template_caps(pad);
    if (pub.have_plan)
      caps = video ? planned_video_caps(caps, pub.plan, pub.fps_n, pub.fps_d)
                   : planned_audio_caps(caps, pub.plan);
  }
  caps = filter_caps(caps, filter);
  gst_query_set_caps_result(query, caps);
  gst_caps_unref(caps);
}

bool answer_frames_duration(GstQuery* query, const Published& pub, gint64 num_buffers) {
  GstFormat format;
  gst_query_parse_duration(query, &format, nullptr);
  int64_t n = pub.frames();  // -1: endless, or not known yet
  if (num_buffers >= 0 && (n < 0 || num_buffers < n)) n = num_buffers;
  if (n < 0) return false;
  if (format == GST_FORMAT_TIME && pub.fps_n > 0) {
    gst_query_set_duration(query, GST_FORMAT_TIME, Lifecycle::frame_time(n, pub.fps_n, pub.fps_d));
    return true;
  }
  if (format == GST_FORMAT_DEFAULT) {
    gst_query_set_duration(query, GST_FORMAT_DEFAULT, n);
    return true;
  }
  return false;
}

bool answer_pad_duration(GstQuery* query, const Published& pub, bool video) {
  GstFormat format;
  gst_query_parse_duration(query, &format, nullptr);
  if (format != GST_FORMAT_TIME || !pub.have_plan) return false;
  const GstClockTime d =
      pub.plan.endless ? GST_CLOCK_TIME_NONE  // no end: the duration is unknown (-1)
      : video          ? Lifecycle::frame_time(pub.plan.num_frames, pub.fps_n, pub.fps_d)
              : Lifecycle::sample_time(pub.plan.audio_samples, static_cast<gint>(pub.plan.audio_rate));
  gst_query_set_duration(query, GST_FORMAT_TIME, static_cast<gint64>(d));
  return true;
}

}  // namespace h3gst
