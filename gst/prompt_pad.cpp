#include "prompt_pad.h"

#include "caps.h"
#include "h3/model_clock.h"
#include "tags.h"

namespace h3gst {

std::string prompt_track_text(const std::string& prompt) {
  if (prompt.size() <= kMaxPromptTrackBytes) return prompt;
  // one_line() also stops at a line break; a prompt's own line breaks stay in the track.
  size_t end = kMaxPromptTrackBytes;
  while (end > 0 && (static_cast<unsigned char>(prompt[end]) & 0xC0) == 0x80) --end;
  return prompt.substr(0, end) + "\xE2\x80\xA6";
}

void PromptPad::reset() {
  begun_ = need_segment_ = done_ = false;
}

static GstEvent* segment_event() {
  GstSegment segment;
  gst_segment_init(&segment, GST_FORMAT_TIME);
  return gst_event_new_segment(&segment);
}

void PromptPad::begin(guint group_id, const GstTagList* tags) {
  gchar* id = gst_pad_create_stream_id(pad_, element_, "prompts");
  GstEvent* start = gst_event_new_stream_start(id);
  g_free(id);
  gst_event_set_group_id(start, group_id);
  gst_event_set_stream_flags(start, GST_STREAM_FLAG_SPARSE);
  gst_pad_push_event(pad_, start);
  GstCaps* caps = gst_caps_new_simple("text/x-raw", "format", G_TYPE_STRING, "utf8", nullptr);
  gst_pad_push_event(pad_, gst_event_new_caps(caps));
  gst_caps_unref(caps);
  gst_pad_push_event(pad_, segment_event());
  if (tags) gst_pad_push_event(pad_, gst_event_new_tag(gst_tag_list_copy(tags)));
  begun_ = true;
  need_segment_ = false;
}

void PromptPad::follow_video(GstBuffer* buf, Lifecycle& lifecycle, guint group_id) {
  const auto n = static_cast<int64_t>(GST_BUFFER_OFFSET(buf));
  if (n % h3::dit::kChunkFrames != 0 || done_) return;
  const Published pub = lifecycle.published();
  GstTagList* tags = begun_ ? nullptr : stream_tags(lifecycle.record().get());
  video_pushed(n, GST_BUFFER_PTS(buf), lifecycle.record().prompt_at(n / h3::dit::kChunkFrames),
               pub.plan.endless ? -1 : pub.plan.num_frames, pub.fps_n, pub.fps_d, group_id, tags);
  if (tags) gst_tag_list_unref(tags);
}

bool PromptPad::answer_caps(GstQuery* query) const {
  GstCaps* filter = nullptr;
  gst_query_parse_caps(query, &filter);
  GstCaps* caps = filter_caps(gst_pad_get_pad_template_caps(pad_), filter);
  gst_query_set_caps_result(query, caps);
  gst_caps_unref(caps);
  return true;
}

void PromptPad::video_pushed(int64_t frame, GstClockTime pts, const std::string& prompt, int64_t clip_frames,
                             gint fps_n, gint fps_d, guint group_id, const GstTagList* tags) {
  if (frame % h3::dit::kChunkFrames != 0 || done_) return;
  if (!begun_) begin(group_id, tags);
  if (need_segment_) {
    gst_pad_push_event(pad_, segment_event());
    need_segment_ = false;
  }
  int64_t next = frame + h3::dit::kChunkFrames;
  if (clip_frames >= 0 && next > clip_frames) next = clip_frames;
  const auto at = [fps_n, fps_d](int64_t n) {
    return gst_util_uint64_scale(static_cast<guint64>(n), static_cast<guint64>(fps_d) * GST_SECOND,
                                 static_cast<guint64>(fps_n));
  };
  const std::string text = prompt_track_text(prompt);
  GstBuffer* buf = gst_buffer_new_memdup(text.data(), text.size());
  GST_BUFFER_PTS(buf) = pts;
  // The video's own stamps (frame_time): the samples join without a gap.
  GST_BUFFER_DURATION(buf) = at(next) - at(frame);
  const GstFlowReturn ret = gst_pad_push(pad_, buf);
  if (ret == GST_FLOW_EOS || ret == GST_FLOW_NOT_LINKED) {
    GST_CAT_DEBUG_OBJECT(category_, element_, "prompt track: %s, the text is dropped from now on",
                         gst_flow_get_name(ret));
    done_ = true;
  } else if (ret != GST_FLOW_OK && ret != GST_FLOW_FLUSHING) {
    GST_CAT_WARNING_OBJECT(category_, element_, "prompt track: pushing chunk %" G_GINT64_FORMAT "'s text: %s",
                           frame / h3::dit::kChunkFrames, gst_flow_get_name(ret));
  }
}

void PromptPad::end(bool eos, guint group_id) {
  if (!eos || done_) return;
  if (!begun_) begin(group_id, nullptr);
  gst_pad_push_event(pad_, gst_event_new_eos());
  done_ = true;
}

void PromptPad::flush_stop(bool restarted) {
  if (restarted) {
    need_segment_ = begun_;
    done_ = false;
  }
}

}  // namespace h3gst
