// One viewer of the live server: a bin in the one pipeline that joins the shared H.264 and Opus
// tees (payloaded for this peer's payload types) and holds this peer's webrtcbin, its answer to
// the page's offer, and the data channel the page opened. Lives on the main thread: webrtcbin's
// threads report through run_on_main, and a report for a viewer already gone is dropped.
#pragma once

#include <gst/gst.h>

#define GST_USE_UNSTABLE_API  // webrtc's headers say so of themselves (1.22)
#include <gst/webrtc/webrtc.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "offer_check.h"

namespace h3live {

struct ViewerEvents {
  std::function<void(const std::string& id, const std::string& answer_sdp)> answered;
  std::function<void(const std::string& id, const std::string& reason)> failed;  // negotiation or ICE
  std::function<void(const std::string& id)> channel_open;
  std::function<void(const std::string& id)> channel_closed;
  std::function<void(const std::string& id, const std::string& text)> message;
};

class Viewer {
 public:
  Viewer(std::string id, GstElement* pipeline, GstElement* video_tee, GstElement* audio_tee,
         const std::string& stun_server, ViewerEvents events);
  ~Viewer();
  Viewer(const Viewer&) = delete;
  Viewer& operator=(const Viewer&) = delete;

  // Starts the answer to `sdp` (checked by check_offer into `offer`); answered or failed follows.
  void negotiate(const std::string& sdp, const Offer& offer);
  // A text message to the page over the data channel; dropped until it is open.
  void send(const std::string& text);

  const std::string& id() const { return id_; }
  bool channel_open() const { return channel_ != nullptr && channel_is_open_; }
  // The RTP timestamp this peer's video carries at running time `running_time` (ns); false
  // before its first packet left the payloader (each payloader draws its own offset).
  bool rtp_time(uint64_t running_time, uint32_t* rtp) const;

  int64_t created_us = 0;     // when the offer came
  int64_t last_heard_us = 0;  // the last message from the page (its keep-alive)

  struct Handle;  // what webrtcbin's threads hold: this viewer, while it is alive

 private:
  void after_remote_description(const Offer& offer);
  // One medium's way from its tee to webrtcbin: queue ! payloader ! webrtcbin.sink_<mline>.
  struct Branch {
    GstElement* tee = nullptr;
    GstElement* payloader = nullptr;
    GstPad* ghost = nullptr;    // the bin's pad the tee feeds
    GstPad* tee_pad = nullptr;  // requested once the answer names the payload type
    int mline = -1;
  };
  void add_branch(Branch* branch, GstElement* tee, const char* payloader, int mline, const std::string& caps);
  void join_tee(Branch* branch, const GstSDPMessage* answer);
  void on_gathering_done();
  static GstPadProbeReturn on_rtp(GstPad* pad, GstPadProbeInfo* info, gpointer handle);

  std::string id_;
  GstElement* pipeline_;
  GstElement* video_tee_;
  GstElement* audio_tee_;
  ViewerEvents events_;
  GstElement* bin_ = nullptr;
  GstElement* webrtc_ = nullptr;
  Branch video_;
  Branch audio_;
  GstWebRTCDataChannel* channel_ = nullptr;
  bool channel_is_open_ = false;
  bool answered_ = false;
  bool local_set_ = false;
  std::atomic<int64_t> rtp_base_{-1};  // RTP time at running time 0 (mod 2^32); -1: not yet
  std::shared_ptr<bool> alive_;
  Handle* handle_ = nullptr;
};

}  // namespace h3live
