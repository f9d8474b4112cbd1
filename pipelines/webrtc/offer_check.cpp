#include "offer_check.h"

#include <gst/sdp/sdp.h>

#include <cstdlib>
#include <cstring>

namespace h3live {
namespace {

// "102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f" -> true when the
// fmtp of `pt` asks for what x264enc gives at profile=constrained-baseline with the payloader's
// packetization-mode=1 (non-interleaved: one NAL unit or a fragment per packet).
bool fmtp_is_constrained_baseline(const GstSDPMedia* media, int pt) {
  const std::string prefix = std::to_string(pt) + " ";
  for (guint i = 0; i < gst_sdp_media_attributes_len(media); ++i) {
    const GstSDPAttribute* a = gst_sdp_media_get_attribute(media, i);
    if (g_strcmp0(a->key, "fmtp") != 0 || a->value == nullptr) continue;
    const std::string value = a->value;
    if (value.compare(0, prefix.size(), prefix) != 0) continue;
    // profile_idc 0x42 (Baseline) with constraint_set1 (0xe0 or 0x40 constraint byte) is what
    // browsers call constrained baseline; level 3.1 (1f) holds any size this server sends.
    const bool mode1 = value.find("packetization-mode=1") != std::string::npos;
    const size_t p = value.find("profile-level-id=");
    if (!mode1 || p == std::string::npos) return false;
    const std::string id = value.substr(p + 17, 6);
    return g_ascii_strncasecmp(id.c_str(), "42e0", 4) == 0 || g_ascii_strncasecmp(id.c_str(), "4240", 4) == 0;
  }
  return false;
}

// The payload type that rtpmap names `encoding` (e.g. "H264/90000"), passing `accept`; -1: none.
template <typename Accept>
int find_payload(const GstSDPMedia* media, const char* encoding, Accept accept) {
  for (guint i = 0; i < gst_sdp_media_attributes_len(media); ++i) {
    const GstSDPAttribute* a = gst_sdp_media_get_attribute(media, i);
    if (g_strcmp0(a->key, "rtpmap") != 0 || a->value == nullptr) continue;
    char* end = nullptr;
    const long pt = std::strtol(a->value, &end, 10);
    if (end == a->value || *end != ' ' || pt < 0 || pt > 127) continue;
    if (g_ascii_strncasecmp(end + 1, encoding, std::strlen(encoding)) != 0) continue;
    if (accept(static_cast<int>(pt))) return static_cast<int>(pt);
  }
  return -1;
}

bool receives(const GstSDPMedia* media) {
  // The viewer must be able to receive: recvonly or sendrecv (the default).
  return gst_sdp_media_get_attribute_val(media, "sendonly") == nullptr &&
         gst_sdp_media_get_attribute_val(media, "inactive") == nullptr;
}

}  // namespace

OfferRefusal check_offer(const std::string& sdp, Offer* offer) {
  *offer = Offer{};
  if (sdp.compare(0, 4, "v=0\r") != 0 && sdp.compare(0, 4, "v=0\n") != 0) {
    return {400, "the body is not an SDP offer (it must start with v=0)"};
  }
  GstSDPMessage* msg = nullptr;
  gst_sdp_message_new(&msg);
  OfferRefusal refusal;
  if (gst_sdp_message_parse_buffer(reinterpret_cast<const guint8*>(sdp.data()), sdp.size(), msg) !=
      GST_SDP_OK) {
    gst_sdp_message_free(msg);
    return {400, "the SDP offer could not be parsed"};
  }
  offer->mlines = static_cast<int>(gst_sdp_message_medias_len(msg));
  for (int i = 0; i < offer->mlines && refusal.status == 0; ++i) {
    const GstSDPMedia* media = gst_sdp_message_get_media(msg, i);
    const char* kind = gst_sdp_media_get_media(media);
    if (g_strcmp0(kind, "video") == 0 && offer->video.mline < 0) {
      if (!receives(media)) continue;
      const int pt =
          find_payload(media, "H264/90000", [&](int p) { return fmtp_is_constrained_baseline(media, p); });
      if (pt < 0) {
        refusal = {400,
                   "the offer's video accepts no H.264 constrained baseline with packetization-mode=1 "
                   "(profile-level-id 42e0xx): the one encoding every viewer shares"};
        break;
      }
      offer->video = {i, pt};
    } else if (g_strcmp0(kind, "audio") == 0 && offer->audio.mline < 0) {
      if (!receives(media)) continue;
      offer->audio = {i, find_payload(media, "opus/48000", [](int) { return true; })};
      if (offer->audio.payload < 0) offer->audio.mline = -1;
    } else if (g_strcmp0(kind, "application") == 0 && offer->data_mline < 0) {
      offer->data_mline = i;
    }
  }
  gst_sdp_message_free(msg);
  if (refusal.status != 0) return refusal;
  if (offer->video.mline < 0)
    return {400, "the offer has no video m-line the viewer receives on (recvonly or sendrecv)"};
  if (offer->data_mline < 0) {
    return {400,
            "the offer has no data channel (m=application): the page's channel carries the chunk times, "
            "the applied prompts and the keep-alive"};
  }
  return refusal;
}

}  // namespace h3live
