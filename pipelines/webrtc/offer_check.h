// What the live server takes from a viewer's SDP offer before any WebRTC element sees it: the
// payload types the one H.264 encoding and the one Opus encoding go out with, the data channel
// the chunk times travel on, or why the offer is refused (HTTP status and a reason the page
// shows). GStreamer's SDP parser only; no pipeline.
#pragma once

#include <string>

namespace h3live {

struct OfferMedia {
  int mline = -1;  // index of the m-line in the offer; -1: absent
  int payload = -1;
};

struct Offer {
  OfferMedia video;     // H.264 constrained baseline, packetization-mode=1
  OfferMedia audio;     // Opus 48 kHz stereo; absent: the viewer gets no sound
  int data_mline = -1;  // m=application (SCTP): the page's data channel
  int mlines = 0;
};

struct OfferRefusal {
  int status = 0;  // 0: accepted
  std::string reason;
};

// Reads `sdp` (the POST body). A refusal names what is wrong: not SDP, no video m-line, video
// without H.264 constrained baseline, no data channel, an m-line the server cannot answer.
OfferRefusal check_offer(const std::string& sdp, Offer* offer);

}  // namespace h3live
