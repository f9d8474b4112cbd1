#include "viewer.h"

#include <gst/rtp/gstrtpbuffer.h>
#include <gst/sdp/sdp.h>
#include <gst/video/video-event.h>

#include <cstdlib>

#include "main_thread.h"

namespace h3live {

struct Viewer::Handle {
  Viewer* viewer;
  std::weak_ptr<bool> alive;
};

namespace {

// Runs `work` on the main thread with the viewer, unless it is gone by then.
void post(const void* handle, std::function<void(Viewer*)> work) {
  const auto* h = static_cast<const Viewer::Handle*>(handle);
  Viewer* viewer = h->viewer;
  std::weak_ptr<bool> alive = h->alive;
  run_on_main([viewer, alive, work = std::move(work)] {
    if (alive.lock()) work(viewer);
  });
}

std::string local_sdp(GstElement* webrtc) {
  GstWebRTCSessionDescription* desc = nullptr;
  g_object_get(webrtc, "local-description", &desc, nullptr);
  if (desc == nullptr) return {};
  gchar* text = gst_sdp_message_as_text(desc->sdp);
  std::string sdp = text;
  g_free(text);
  gst_webrtc_session_description_free(desc);
  return sdp;
}

}  // namespace

Viewer::Viewer(std::string id, GstElement* pipeline, GstElement* video_tee, GstElement* audio_tee,
               const std::string& stun_server, ViewerEvents events)
    : id_(std::move(id)),
      pipeline_(pipeline),
      video_tee_(video_tee),
      audio_tee_(audio_tee),
      events_(std::move(events)),
      alive_(std::make_shared<bool>(true)) {
  handle_ = new Handle{this, alive_};
  bin_ = gst_bin_new(("viewer-" + id_).c_str());
  webrtc_ = gst_element_factory_make("webrtcbin", "webrtc");
  // max-bundle: one transport for video, sound and data (what browsers offer).
  g_object_set(webrtc_, "bundle-policy", GST_WEBRTC_BUNDLE_POLICY_MAX_BUNDLE, nullptr);
  if (!stun_server.empty()) g_object_set(webrtc_, "stun-server", stun_server.c_str(), nullptr);
  gst_bin_add(GST_BIN(bin_), webrtc_);
  g_signal_connect(webrtc_, "on-data-channel",
                   G_CALLBACK(+[](GstElement*, GstWebRTCDataChannel* channel, gpointer handle) {
                     g_object_ref(channel);
                     auto on_open = +[](GstWebRTCDataChannel*, gpointer handle) {
                       post(handle, [](Viewer* v) {
                         if (v->channel_is_open_) return;
                         v->channel_is_open_ = true;
                         if (v->events_.channel_open) v->events_.channel_open(v->id_);
                       });
                     };
                     g_signal_connect(channel, "on-open", G_CALLBACK(on_open), handle);
                     g_signal_connect(channel, "on-close",
                                      G_CALLBACK(+[](GstWebRTCDataChannel*, gpointer handle) {
                                        post(handle, [](Viewer* v) {
                                          v->channel_is_open_ = false;
                                          if (v->events_.channel_closed) v->events_.channel_closed(v->id_);
                                        });
                                      }),
                                      handle);
                     g_signal_connect(channel, "on-message-string",
                                      G_CALLBACK(+[](GstWebRTCDataChannel*, gchar* text, gpointer handle) {
                                        std::string copy = text ? text : "";
                                        post(handle, [copy](Viewer* v) {
                                          if (v->events_.message) v->events_.message(v->id_, copy);
                                        });
                                      }),
                                      handle);
                     post(handle, [channel](Viewer* v) {
                       if (v->channel_ != nullptr) {  // the page opens one; a second is not listened to
                         g_object_unref(channel);
                         return;
                       }
                       v->channel_ = channel;
                       GstWebRTCDataChannelState state;
                       g_object_get(channel, "ready-state", &state, nullptr);
                       if (state == GST_WEBRTC_DATA_CHANNEL_STATE_OPEN && !v->channel_is_open_) {
                         v->channel_is_open_ = true;
                         if (v->events_.channel_open) v->events_.channel_open(v->id_);
                       }
                     });
                   }),
                   handle_);
  g_signal_connect(webrtc_, "notify::ice-gathering-state",
                   G_CALLBACK(+[](GstElement* webrtc, GParamSpec*, gpointer handle) {
                     GstWebRTCICEGatheringState state;
                     g_object_get(webrtc, "ice-gathering-state", &state, nullptr);
                     if (state == GST_WEBRTC_ICE_GATHERING_STATE_COMPLETE) {
                       post(handle, [](Viewer* v) { v->on_gathering_done(); });
                     }
                   }),
                   handle_);
  g_signal_connect(webrtc_, "notify::ice-connection-state",
                   G_CALLBACK(+[](GstElement* webrtc, GParamSpec*, gpointer handle) {
                     GstWebRTCICEConnectionState state;
                     g_object_get(webrtc, "ice-connection-state", &state, nullptr);
                     if (state == GST_WEBRTC_ICE_CONNECTION_STATE_FAILED ||
                         state == GST_WEBRTC_ICE_CONNECTION_STATE_CLOSED) {
                       post(handle, [state](Viewer* v) {
                         if (v->events_.failed) {
                           v->events_.failed(v->id_, state == GST_WEBRTC_ICE_CONNECTION_STATE_FAILED
                                                         ? "ICE failed (no candidate pair answered)"
                                                         : "ICE closed");
                         }
                       });
                     }
                   }),
                   handle_);
  gst_bin_add(GST_BIN(pipeline_), bin_);
  gst_element_sync_state_with_parent(bin_);
}

Viewer::~Viewer() {
  *alive_ = false;
  alive_.reset();  // reports already on their way to the main loop find it gone
  // Off the tees first: the shared encodings go on for everyone else.
  for (Branch* branch : {&video_, &audio_}) {
    if (branch->tee_pad == nullptr) continue;
    gst_pad_unlink(branch->tee_pad, branch->ghost);
    gst_element_release_request_pad(branch->tee, branch->tee_pad);
    gst_object_unref(branch->tee_pad);
    branch->tee_pad = nullptr;
  }
  // NULL stops webrtcbin's threads, so nothing calls back with handle_ after this.
  gst_element_set_state(bin_, GST_STATE_NULL);
  if (channel_ != nullptr) {
    g_signal_handlers_disconnect_by_data(channel_, handle_);
    g_object_unref(channel_);
  }
  g_signal_handlers_disconnect_by_data(webrtc_, handle_);
  gst_bin_remove(GST_BIN(pipeline_), bin_);
  delete handle_;
}

void Viewer::negotiate(const std::string& sdp, const Offer& offer) {
  GstSDPMessage* msg = nullptr;
  gst_sdp_message_new_from_text(sdp.c_str(), &msg);
  GstWebRTCSessionDescription* desc = gst_webrtc_session_description_new(GST_WEBRTC_SDP_TYPE_OFFER, msg);
  struct Step {
    Handle handle;
    Offer offer;
  };
  GstPromise* promise = gst_promise_new_with_change_func(
      [](GstPromise* p, gpointer data) {
        const auto* step = static_cast<Step*>(data);
        const bool ok = gst_promise_wait(p) == GST_PROMISE_RESULT_REPLIED;
        const GstStructure* reply = ok ? gst_promise_get_reply(p) : nullptr;
        std::string error;
        if (reply != nullptr && gst_structure_has_field(reply, "error")) {
          GError* err = nullptr;
          gst_structure_get(reply, "error", G_TYPE_ERROR, &err, nullptr);
          error = err ? err->message : "error";
          g_clear_error(&err);
        } else if (!ok) {
          error = "interrupted";
        }
        const Offer offer = step->offer;
        post(&step->handle, [offer, error](Viewer* v) {
          if (!error.empty()) {
            if (v->events_.failed) v->events_.failed(v->id_, "webrtcbin refused the offer: " + error);
            return;
          }
          v->after_remote_description(offer);
        });
        gst_promise_unref(p);
      },
      new Step{*handle_, offer}, [](gpointer data) { delete static_cast<Step*>(data); });
  g_signal_emit_by_name(webrtc_, "set-remote-description", desc, promise);
  gst_webrtc_session_description_free(desc);
}

void Viewer::add_branch(Branch* branch, GstElement* tee, const char* payloader, int mline,
                        const std::string& caps_text) {
  GstCaps* caps = gst_caps_from_string(caps_text.c_str());
  // The transceiver webrtcbin made for the offer's m-line sends only, this codec.
  GArray* transceivers = nullptr;
  g_signal_emit_by_name(webrtc_, "get-transceivers", &transceivers);
  for (guint i = 0; transceivers != nullptr && i < transceivers->len; ++i) {
    auto* t = g_array_index(transceivers, GstWebRTCRTPTransceiver*, i);
    guint index = 0;
    g_object_get(t, "mlineindex", &index, nullptr);
    if (static_cast<int>(index) == mline) {
      g_object_set(t, "direction", GST_WEBRTC_RTP_TRANSCEIVER_DIRECTION_SENDONLY, "codec-preferences", caps,
                   nullptr);
    }
  }
  if (transceivers != nullptr) g_array_unref(transceivers);
  GstElement* queue = gst_element_factory_make("queue", nullptr);
  // A viewer that cannot keep up loses frames, never holds the encoder (and so every other viewer) back.
  g_object_set(queue, "leaky", 2 /* downstream */, "max-size-buffers", 0, "max-size-bytes", 0,
               "max-size-time", static_cast<guint64>(2 * GST_SECOND), nullptr);
  GstElement* pay = gst_element_factory_make(payloader, nullptr);
  if (g_object_class_find_property(G_OBJECT_GET_CLASS(pay), "config-interval")) {
    g_object_set(pay, "config-interval", -1, nullptr);  // SPS/PPS before every key frame
  }
  gst_bin_add_many(GST_BIN(bin_), queue, pay, nullptr);
  gst_element_link(queue, pay);
  const std::string sink_name = "sink_" + std::to_string(mline);
  GstPad* sink = gst_element_request_pad(webrtc_, gst_element_get_pad_template(webrtc_, "sink_%u"),
                                         sink_name.c_str(), caps);
  GstPad* src = gst_element_get_static_pad(pay, "src");
  if (sink == nullptr || gst_pad_link(src, sink) != GST_PAD_LINK_OK) {
    g_printerr("h3-live: viewer %s: could not link %s to webrtcbin's %s\n", id_.c_str(), payloader,
               sink_name.c_str());
  }
  if (tee == video_tee_) gst_pad_add_probe(src, GST_PAD_PROBE_TYPE_BUFFER, on_rtp, handle_, nullptr);
  gst_object_unref(src);
  if (sink != nullptr) gst_object_unref(sink);
  gst_caps_unref(caps);
  GstPad* queue_sink = gst_element_get_static_pad(queue, "sink");
  branch->ghost = gst_ghost_pad_new(nullptr, queue_sink);
  gst_object_unref(queue_sink);
  gst_pad_set_active(branch->ghost, TRUE);
  gst_element_add_pad(bin_, branch->ghost);
  gst_element_sync_state_with_parent(queue);
  gst_element_sync_state_with_parent(pay);
  branch->tee = tee;
  branch->payloader = pay;
  branch->mline = mline;
}

void Viewer::join_tee(Branch* branch, const GstSDPMessage* answer) {
  if (branch->payloader == nullptr) return;
  // The payload type the answer names (webrtcbin picks among the offer's own, e.g. the first H.264
  // of packetization-mode 1): the packets must carry that one.
  const GstSDPMedia* media = static_cast<guint>(branch->mline) < gst_sdp_message_medias_len(answer)
                                 ? gst_sdp_message_get_media(answer, branch->mline)
                                 : nullptr;
  if (media == nullptr || gst_sdp_media_formats_len(media) == 0) return;
  g_object_set(branch->payloader, "pt", static_cast<guint>(std::atoi(gst_sdp_media_get_format(media, 0))),
               nullptr);
  branch->tee_pad = gst_element_request_pad_simple(branch->tee, "src_%u");
  gst_pad_link(branch->tee_pad, branch->ghost);
}

void Viewer::after_remote_description(const Offer& offer) {
  add_branch(&video_, video_tee_, "rtph264pay", offer.video.mline,
             "application/x-rtp,media=video,encoding-name=H264,clock-rate=90000,packetization-mode=(string)1,"
             "profile-level-id=(string)42e01f");
  if (offer.audio.mline >= 0) {
    add_branch(&audio_, audio_tee_, "rtpopuspay", offer.audio.mline,
               "application/x-rtp,media=audio,encoding-name=OPUS,clock-rate=48000");
  }
  GstPromise* promise = gst_promise_new_with_change_func(
      [](GstPromise* p, gpointer handle) {
        GstWebRTCSessionDescription* answer = nullptr;
        if (gst_promise_wait(p) == GST_PROMISE_RESULT_REPLIED) {
          gst_structure_get(gst_promise_get_reply(p), "answer", GST_TYPE_WEBRTC_SESSION_DESCRIPTION, &answer,
                            nullptr);
        }
        gst_promise_unref(p);
        if (answer == nullptr) {
          post(handle, [](Viewer* v) {
            if (v->events_.failed) v->events_.failed(v->id_, "webrtcbin made no answer to the offer");
          });
          return;
        }
        post(handle, [answer](Viewer* v) {
          g_signal_emit_by_name(v->webrtc_, "set-local-description", answer, nullptr);
          v->join_tee(&v->video_, answer->sdp);
          v->join_tee(&v->audio_, answer->sdp);
          gst_webrtc_session_description_free(answer);
          // A key frame now, for this viewer (the shared encoder's next one comes within a second).
          if (v->video_.tee_pad != nullptr) {
            gst_pad_send_event(v->video_.tee_pad,
                               gst_video_event_new_upstream_force_key_unit(GST_CLOCK_TIME_NONE, TRUE, 0));
          }
          v->local_set_ = true;
          GstWebRTCICEGatheringState state;
          g_object_get(v->webrtc_, "ice-gathering-state", &state, nullptr);
          if (state == GST_WEBRTC_ICE_GATHERING_STATE_COMPLETE) v->on_gathering_done();
        });
      },
      handle_, nullptr);
  g_signal_emit_by_name(webrtc_, "create-answer", nullptr, promise);
}

void Viewer::on_gathering_done() {
  // The answer goes out whole, with every candidate (no trickle): on the loopback and a LAN the
  // host candidates are all there is, and gathering them takes milliseconds.
  if (answered_ || !local_set_) return;
  const std::string sdp = local_sdp(webrtc_);
  if (sdp.find("a=candidate") == std::string::npos) return;  // gathered before the description: wait
  answered_ = true;
  if (events_.answered) events_.answered(id_, sdp);
}

void Viewer::send(const std::string& text) {
  if (!channel_open()) return;
  GError* err = nullptr;
  if (!gst_webrtc_data_channel_send_string_full(channel_, text.c_str(), &err)) g_clear_error(&err);
}

GstPadProbeReturn Viewer::on_rtp(GstPad* pad, GstPadProbeInfo* info, gpointer handle) {
  GstBuffer* buf = GST_PAD_PROBE_INFO_BUFFER(info);
  GstRTPBuffer rtp = GST_RTP_BUFFER_INIT;
  if (!GST_BUFFER_PTS_IS_VALID(buf) || !gst_rtp_buffer_map(buf, GST_MAP_READ, &rtp)) return GST_PAD_PROBE_OK;
  const uint32_t stamp = gst_rtp_buffer_get_timestamp(&rtp);
  gst_rtp_buffer_unmap(&rtp);
  guint64 running_time = GST_BUFFER_PTS(buf);
  if (GstEvent* seg = gst_pad_get_sticky_event(pad, GST_EVENT_SEGMENT, 0)) {
    const GstSegment* segment = nullptr;
    gst_event_parse_segment(seg, &segment);
    running_time = gst_segment_to_running_time(segment, GST_FORMAT_TIME, GST_BUFFER_PTS(buf));
    gst_event_unref(seg);
  }
  const uint32_t at_zero =
      stamp - static_cast<uint32_t>(gst_util_uint64_scale(running_time, 90000, GST_SECOND));
  static_cast<Handle*>(handle)->viewer->rtp_base_ = at_zero;
  return GST_PAD_PROBE_REMOVE;  // the payloader's offset is fixed from its first packet on
}

bool Viewer::rtp_time(uint64_t running_time, uint32_t* rtp) const {
  const int64_t base = rtp_base_;
  if (base < 0) return false;
  *rtp = static_cast<uint32_t>(base) +
         static_cast<uint32_t>(gst_util_uint64_scale(running_time, 90000, GST_SECOND));
  return true;
}

}  // namespace h3live
