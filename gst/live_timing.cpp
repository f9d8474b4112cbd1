#include "live_timing.h"

#include <mutex>

namespace h3gst {

GstClockTime live_latency(const Published& pub) {
  GstClockTime est = pub.fps_n > 0 ? Lifecycle::frame_time(1, pub.fps_n, pub.fps_d) : 0;
  if (GST_CLOCK_TIME_IS_VALID(pub.chunk_time)) est = MAX(est, pub.chunk_time + pub.chunk_time / 20);
  return est;
}

void answer_live_latency(GstQuery* query, const Published& pub) {
  gboolean live = FALSE;
  GstClockTime min = 0, max = GST_CLOCK_TIME_NONE;
  gst_query_parse_latency(query, &live, &min, &max);
  min = MAX(min, live_latency(pub));
  // The queue can hold queue-chunks more chunks: that much more waiting is fine.
  if (GST_CLOCK_TIME_IS_VALID(max)) max = MAX(max, min);
  gst_query_set_latency(query, TRUE, min, max);
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
  // The frame's running time as the stream's anchor puts it; the jitter is how late it goes out.
  GstMessage* m = gst_message_new_qos(GST_OBJECT(element), TRUE, first_running_ + pts, pts, pts, duration);
  gst_message_set_qos_values(m, static_cast<gint64>(late), 1.0, 1000000);
  gst_message_set_qos_stats(m, GST_FORMAT_BUFFERS, static_cast<guint64>(n), 0);
  gst_element_post_message(element, m);
  if (warned_) return;
  warned_ = true;
  // Each late chunk adds its shortfall: a shorter clip ends before it falls far behind, but an
  // endless stream has no num-frames to lower.
  GST_ELEMENT_WARNING_WITH_DETAILS(
      element, STREAM, FAILED,
      ("Generation is slower than real time: frame %" G_GINT64_FORMAT " came %" G_GUINT64_FORMAT
       " ms after it was due. Frames are sent late, none is dropped; lower %swidth/height or steps, add "
       "ranks, or use is-live=false",
       n, static_cast<guint64>(late / GST_MSECOND), pub.plan.endless ? "" : "num-frames, "),
      (nullptr), ("frame", G_TYPE_INT64, n, "lateness", G_TYPE_UINT64, static_cast<guint64>(late), nullptr));
}

bool LivePacer::pace(GstElement* element, GstBuffer* buf, const Published* chunk, int64_t frame,
                     GstClockTimeDiff* ready_late) {
  if (!live_) return true;
  if (!clock_.stamp_and_wait(element, slot_, buf, ready_late)) return false;
  if (chunk != nullptr)
    lateness_.chunk_start(element, *chunk, frame, GST_BUFFER_PTS(buf), GST_BUFFER_DURATION(buf));
  return true;
}

void LiveClock::reset(bool playing) {
  std::lock_guard<std::mutex> lock(mutex_);
  playing_ = playing;
  stopped_ = false;
  anchor_ = GST_CLOCK_TIME_NONE;
  changed_.notify_all();
}

void LiveClock::set_playing(bool playing) {
  std::lock_guard<std::mutex> lock(mutex_);
  playing_ = playing;
  if (!playing) {
    for (GstClockID id : waits_) {
      if (id) gst_clock_id_unschedule(id);
    }
  }
  changed_.notify_all();
}

void LiveClock::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  stopped_ = true;
  for (GstClockID id : waits_) {
    if (id) gst_clock_id_unschedule(id);
  }
  changed_.notify_all();
}

bool LiveClock::stamp_and_wait(GstElement* element, int slot, GstBuffer* buf, GstClockTimeDiff* ready_late) {
  std::unique_lock<std::mutex> lock(mutex_);
  bool measured = false;
  for (;;) {
    changed_.wait(lock, [&] { return playing_ || stopped_; });
    if (stopped_) return false;
    GstClock* clock = gst_element_get_clock(element);
    if (clock == nullptr) return true;
    const GstClockTime base = gst_element_get_base_time(element);
    if (!GST_CLOCK_TIME_IS_VALID(anchor_)) {
      const GstClockTime now = gst_clock_get_time(clock);
      anchor_ = now > base ? now - base : 0;
    }
    if (!GST_BUFFER_FLAG_IS_SET(buf, GST_BUFFER_FLAG_LIVE)) {  // stamped once, also when held
      GST_BUFFER_PTS(buf) += anchor_;
      GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_LIVE);
    }
    if (ready_late != nullptr && !measured) {  // when it came, not after a pause
      *ready_late = GST_CLOCK_DIFF(base + GST_BUFFER_PTS(buf), gst_clock_get_time(clock));
      measured = true;
    }
    GstClockID id = gst_clock_new_single_shot_id(clock, base + GST_BUFFER_PTS(buf));
    gst_object_unref(clock);
    waits_[slot] = id;
    lock.unlock();
    const GstClockReturn r = gst_clock_id_wait(id, nullptr);
    lock.lock();
    waits_[slot] = nullptr;
    gst_clock_id_unref(id);
    // Unscheduled by a pause: wait for PLAYING again (the base time has moved), or by a stop.
    if (r != GST_CLOCK_UNSCHEDULED) return true;
  }
}

}  // namespace h3gst
