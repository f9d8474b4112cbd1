#include "broadcast.h"

#include "main_thread.h"

namespace h3live {

Broadcast::Broadcast(const std::string& h3src_properties, const std::string& hls_dir, BroadcastEvents events)
    : events_(std::move(events)) {
  // is-live: buffers stamped with running times and paced to the clock, so a viewer joining late
  // gets the present, not a backlog. key-int-max=24: an HLS segment every second; a viewer that
  // joins asks for a key frame at once (force-key-unit, and the browser's PLI).
  description_ =
      "h3src name=src sampler=causal is-live=true num-frames=-1 " + h3src_properties +
      " src.video ! queue ! videoconvert ! video/x-raw,format=I420"
      " ! x264enc tune=zerolatency speed-preset=veryfast key-int-max=24 bitrate=1000"
      " ! video/x-h264,profile=constrained-baseline ! h264parse config-interval=-1"
      " ! video/x-h264,stream-format=byte-stream,alignment=au ! tee name=vtee allow-not-linked=true"
      " src.audio ! queue ! audioconvert ! audioresample ! audio/x-raw,rate=48000"
      " ! tee name=rawatee allow-not-linked=true"
      " rawatee. ! queue ! opusenc ! tee name=atee allow-not-linked=true";
  if (!hls_dir.empty()) {
    // The same H.264 in MPEG-TS; browsers' HLS takes AAC, not Opus: the sound alone is encoded twice.
    description_ +=
        " vtee. ! queue ! h.video rawatee. ! queue ! audioconvert ! avenc_aac ! aacparse ! h.audio"
        " hlssink2 name=h target-duration=1 playlist-length=6 max-files=8 location=\"" +
        hls_dir + "/segment%05d.ts\" playlist-location=\"" + hls_dir + "/live.m3u8\"";
  }
}

Broadcast::~Broadcast() {
  if (pipeline_ != nullptr) {
    gst_element_set_state(pipeline_, GST_STATE_NULL);
    if (bus_watch_ != 0) g_source_remove(bus_watch_);
    gst_object_unref(source_);
    gst_object_unref(video_tee_);
    gst_object_unref(audio_tee_);
    gst_object_unref(pipeline_);
  }
}

bool Broadcast::start(std::string* error) {
  GError* err = nullptr;
  pipeline_ = gst_parse_launch_full(description_.c_str(), nullptr, GST_PARSE_FLAG_FATAL_ERRORS, &err);
  if (pipeline_ == nullptr) {
    *error = std::string("the pipeline could not be built: ") + (err ? err->message : "unknown error") +
             " (pipeline: " + description_ + ")";
    g_clear_error(&err);
    return false;
  }
  source_ = gst_bin_get_by_name(GST_BIN(pipeline_), "src");
  video_tee_ = gst_bin_get_by_name(GST_BIN(pipeline_), "vtee");
  audio_tee_ = gst_bin_get_by_name(GST_BIN(pipeline_), "atee");
  GstPad* video = gst_element_get_static_pad(source_, "video");
  gst_pad_add_probe(video, GST_PAD_PROBE_TYPE_BUFFER, on_video_buffer, this, nullptr);
  gst_object_unref(video);
  GstBus* bus = gst_element_get_bus(pipeline_);
  bus_watch_ = gst_bus_add_watch(bus, on_bus_message, this);
  gst_object_unref(bus);
  if (gst_element_set_state(pipeline_, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    *error = "the pipeline did not start (the bus error says why)";
    return false;
  }
  return true;
}

bool Broadcast::change_prompt(const std::string& prompt) {
  GstStructure* s = gst_structure_new("h3-prompt", "prompt", G_TYPE_STRING, prompt.c_str(), nullptr);
  return gst_element_send_event(source_, gst_event_new_custom(GST_EVENT_CUSTOM_UPSTREAM, s));
}

GstPadProbeReturn Broadcast::on_video_buffer(GstPad* pad, GstPadProbeInfo* info, gpointer self) {
  GstBuffer* buf = GST_PAD_PROBE_INFO_BUFFER(info);
  const guint64 frame = GST_BUFFER_OFFSET(buf);  // h3src numbers its frames in the offset
  if (frame == GST_BUFFER_OFFSET_NONE || frame % kFramesPerChunk != 0) return GST_PAD_PROBE_OK;
  const int64_t wall_us = g_get_real_time();
  guint64 running_time = GST_BUFFER_PTS(buf);
  if (GstEvent* seg = gst_pad_get_sticky_event(pad, GST_EVENT_SEGMENT, 0)) {
    const GstSegment* segment = nullptr;
    gst_event_parse_segment(seg, &segment);
    running_time = gst_segment_to_running_time(segment, GST_FORMAT_TIME, GST_BUFFER_PTS(buf));
    gst_event_unref(seg);
  }
  auto* broadcast = static_cast<Broadcast*>(self);
  const int64_t chunk = static_cast<int64_t>(frame / kFramesPerChunk);
  run_on_main([broadcast, chunk, running_time, wall_us] {
    if (broadcast->events_.chunk_out) broadcast->events_.chunk_out(chunk, running_time, wall_us);
  });
  return GST_PAD_PROBE_OK;
}

gboolean Broadcast::on_bus_message(GstBus*, GstMessage* message, gpointer self) {
  auto* broadcast = static_cast<Broadcast*>(self);
  switch (GST_MESSAGE_TYPE(message)) {
    case GST_MESSAGE_ELEMENT: {
      const GstStructure* s = gst_message_get_structure(message);
      if (s != nullptr && gst_structure_has_name(s, "h3-prompt-applied")) {
        gint64 chunk = -1;
        guint64 running_time = GST_CLOCK_TIME_NONE;
        gst_structure_get_int64(s, "chunk", &chunk);
        gst_structure_get_uint64(s, "running-time", &running_time);
        if (broadcast->events_.prompt_applied) broadcast->events_.prompt_applied(chunk, running_time);
      }
      break;
    }
    case GST_MESSAGE_ERROR: {
      GError* err = nullptr;
      gchar* debug = nullptr;
      gst_message_parse_error(message, &err, &debug);
      const std::string text = std::string(GST_OBJECT_NAME(GST_MESSAGE_SRC(message))) + ": " + err->message +
                               (debug ? std::string(" (") + debug + ")" : "");
      g_clear_error(&err);
      g_free(debug);
      std::string viewer;
      for (GstObject* o = GST_MESSAGE_SRC(message); o != nullptr; o = GST_OBJECT_PARENT(o)) {
        if (g_str_has_prefix(GST_OBJECT_NAME(o), "viewer-")) viewer = GST_OBJECT_NAME(o) + 7;
      }
      if (!viewer.empty()) {
        if (broadcast->events_.viewer_failed) broadcast->events_.viewer_failed(viewer, text);
      } else if (broadcast->events_.failed) {
        broadcast->events_.failed(text);
      }
      break;
    }
    case GST_MESSAGE_WARNING: {
      GError* err = nullptr;
      gst_message_parse_warning(message, &err, nullptr);
      g_printerr("h3-live: warning from %s: %s\n", GST_OBJECT_NAME(GST_MESSAGE_SRC(message)), err->message);
      g_clear_error(&err);
      break;
    }
    default: break;
  }
  return G_SOURCE_CONTINUE;
}

}  // namespace h3live
