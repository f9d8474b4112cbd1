#include "live_timing.h"

namespace h3gst {

GstClockTime live_latency(const Published& pub) {
  GstClockTime est = pub.fps_n > 0 ? Lifecycle::frame_time(1, pub.fps_n, pub.fps_d) : 0;
  if (GST_CLOCK_TIME_IS_VALID(pub.chunk_time)) est = MAX(est, pub.chunk_time + pub.chunk_time / 20);
  return est;
}

void live_buffer_times(bool live, GstBuffer* buffer, GstClockTime* start, GstClockTime* end) {
  *start = *end = GST_CLOCK_TIME_NONE;
  if (!live) return;
  const GstClockTime ts = GST_BUFFER_PTS(buffer);
  if (!GST_CLOCK_TIME_IS_VALID(ts)) return;
  *start = ts;
  if (GST_BUFFER_DURATION_IS_VALID(buffer)) *end = ts + GST_BUFFER_DURATION(buffer);
}

void LatenessMonitor::chunk_start(GstElement* element, const Published& pub, int64_t n, GstClockTime pts,
                                  GstClockTime duration) {
  GstClock* clock = gst_element_get_clock(element);
  if (!clock) return;
  const GstClockTime now = gst_clock_get_time(clock) - gst_element_get_base_time(element);
  gst_object_unref(clock);
  if (!GST_CLOCK_TIME_IS_VALID(first_running_)) {
    first_running_ = now - pts;
    return;
  }
  const GstClockTime due = first_running_ + pts + live_latency(pub);
  if (now <= due) return;
  const GstClockTime late = now - due;
  GstMessage* m = gst_message_new_qos(GST_OBJECT(element), TRUE, now, pts, pts, duration);
  gst_message_set_qos_values(m, static_cast<gint64>(late), 1.0, 1000000);
  gst_message_set_qos_stats(m, GST_FORMAT_BUFFERS, static_cast<guint64>(n), 0);
  gst_element_post_message(element, m);
  if (warned_) return;
  warned_ = true;
  GST_ELEMENT_WARNING_WITH_DETAILS(
      element, STREAM, FAILED,
      ("Generation is slower than real time: frame %" G_GINT64_FORMAT " came %" G_GUINT64_FORMAT
       " ms after it was due. Frames are sent late, none is dropped; lower num-frames, width/height or "
       "steps, add ranks, or use is-live=false",
       n, static_cast<guint64>(late / GST_MSECOND)),
      (nullptr), ("frame", G_TYPE_INT64, n, "lateness", G_TYPE_UINT64, static_cast<guint64>(late), nullptr));
}

}  // namespace h3gst
