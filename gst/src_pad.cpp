#include "src_pad.h"

#include "video_pool.h"

namespace h3gst {

void SrcPad::reset(bool live) {
  release_pool();
  gst_clear_buffer(&held_);
  pacer_.reset(live);
  next = 0;
  configured_ = need_segment_ = downstream_done_ = false;
}

void SrcPad::flush_stop(bool restarted) {
  pacer_.restart();
  if (!restarted) return;
  gst_clear_buffer(&held_);
  next = 0;
  downstream_done_ = false;
  need_segment_ = configured_;
}

void SrcPad::stop_task() {
  gst_pad_stop_task(pad_);
  gst_clear_buffer(&held_);
}

void SrcPad::release_pool() {
  if (!pool_) return;
  gst_buffer_pool_set_active(pool_, FALSE);
  gst_object_unref(pool_);
  pool_ = nullptr;
}

GstCaps* SrcPad::negotiate(GstCaps* offered, const std::function<void(GstCaps* caps)>& fixate) {
  GstCaps* peer = gst_pad_peer_query_caps(pad_, offered);
  GstCaps* caps = gst_caps_intersect_full(peer, offered, GST_CAPS_INTERSECT_FIRST);
  gst_caps_unref(peer);
  gst_caps_unref(offered);
  if (gst_caps_is_empty(caps)) {
    gst_caps_unref(caps);
    GST_ELEMENT_ERROR(element_, STREAM, FORMAT,
                      ("Downstream of the %s pad accepts none of its formats", GST_PAD_NAME(pad_)),
                      (nullptr));
    return nullptr;
  }
  caps = gst_caps_truncate(gst_caps_make_writable(caps));
  fixate(caps);
  return gst_caps_fixate(caps);
}

bool SrcPad::begin(GstCaps* caps, guint group_id, GstTagList* tags, guint size, bool video) {
  gchar* stream_id = gst_pad_create_stream_id(pad_, element_, GST_PAD_NAME(pad_));
  GstEvent* ss = gst_event_new_stream_start(stream_id);
  g_free(stream_id);
  gst_event_set_group_id(ss, group_id);
  gst_pad_push_event(pad_, ss);
  if (!gst_pad_set_caps(pad_, caps)) {
    gst_tag_list_unref(tags);
    if (!GST_PAD_IS_FLUSHING(pad_)) {
      GST_ELEMENT_ERROR(element_, CORE, NEGOTIATION,
                        ("Could not negotiate the %s pad's format", GST_PAD_NAME(pad_)),
                        ("caps %" GST_PTR_FORMAT, static_cast<void*>(caps)));
    }
    return false;
  }
  GstSegment segment;
  gst_segment_init(&segment, GST_FORMAT_TIME);
  gst_pad_push_event(pad_, gst_event_new_segment(&segment));
  gst_pad_push_event(pad_, gst_event_new_tag(tags));

  // The pool: what downstream proposes in its answer to the allocation query, else our own.
  GstQuery* query = gst_query_new_allocation(caps, TRUE);
  gst_pad_peer_query(pad_, query);
  bool ok = true;
  if (video) {
    ok = decide_video_pool(element_, query);
  } else if (gst_query_get_n_allocation_pools(query) == 0) {
    gst_query_add_allocation_pool(query, nullptr, size, 0, 0);
  }
  GstBufferPool* pool = nullptr;
  guint min = 0, max = 0;
  if (ok) gst_query_parse_nth_allocation_pool(query, 0, &pool, &size, &min, &max);
  gst_query_unref(query);
  if (!ok) return false;
  if (!pool) {
    pool = gst_buffer_pool_new();
    GstStructure* config = gst_buffer_pool_get_config(pool);
    gst_buffer_pool_config_set_params(config, caps, size, min, max);
    gst_buffer_pool_set_config(pool, config);
  }
  release_pool();
  pool_ = pool;
  if (!gst_buffer_pool_set_active(pool_, TRUE)) {
    GST_ELEMENT_ERROR(element_, RESOURCE, SETTINGS,
                      ("Could not activate the %s pad's buffer pool", GST_PAD_NAME(pad_)), (nullptr));
    return false;
  }
  configured_ = true;
  return true;
}

GstBuffer* SrcPad::acquire() {
  GstBuffer* buf = nullptr;
  const GstFlowReturn r = gst_buffer_pool_acquire_buffer(pool_, &buf, nullptr);
  if (r == GST_FLOW_OK) return buf;
  if (r != GST_FLOW_FLUSHING) GST_ELEMENT_FLOW_ERROR(element_, r);
  gst_pad_pause_task(pad_);
  return nullptr;
}

bool SrcPad::push_held() {
  GstBuffer* buf = held_;
  if (buf == nullptr) return false;
  held_ = nullptr;
  push_paced(buf);
  return true;
}

void SrcPad::push_paced(GstBuffer* buf, const Published* chunk, int64_t frame, GstClockTimeDiff* ready_late) {
  if (!pacer_.pace(element_, buf, chunk, frame, ready_late)) {
    held_ = buf;
    return;
  }
  if (pushed_) pushed_(buf);
  push(buf);
}

void SrcPad::push(GstBuffer* buf) {
  if (downstream_done_) {
    gst_buffer_unref(buf);
    return;
  }
  if (need_segment_) {  // after a flush: the clip starts over at 0
    need_segment_ = false;
    GstSegment segment;
    gst_segment_init(&segment, GST_FORMAT_TIME);
    gst_pad_push_event(pad_, gst_event_new_segment(&segment));
  }
  const GstFlowReturn r = gst_pad_push(pad_, buf);
  switch (r) {
    case GST_FLOW_OK:
    case GST_FLOW_NOT_LINKED: return;
    case GST_FLOW_EOS:
      GST_CAT_DEBUG_OBJECT(category_, element_, "%s: downstream is done; draining", GST_PAD_NAME(pad_));
      downstream_done_ = true;
      return;
    case GST_FLOW_FLUSHING:
      GST_CAT_DEBUG_OBJECT(category_, element_, "%s: flushing", GST_PAD_NAME(pad_));
      gst_pad_pause_task(pad_);
      return;
    default:
      GST_ELEMENT_FLOW_ERROR(element_, r);
      gst_pad_push_event(pad_, gst_event_new_eos());
      gst_pad_pause_task(pad_);
      return;
  }
}

void SrcPad::end(bool eos) {
  gst_pad_pause_task(pad_);
  if (!eos) return;
  GST_CAT_DEBUG_OBJECT(category_, element_, "%s: EOS after %" G_GINT64_FORMAT, GST_PAD_NAME(pad_), next);
  gst_pad_push_event(pad_, gst_event_new_eos());
}

}  // namespace h3gst
