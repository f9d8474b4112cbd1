// The live server's checks that need no pipeline (pipelines/webrtc/): what an SDP offer gives
// the one encoding (or why it is refused), and how many prompt changes a second pass.
#include <gtest/gtest.h>

#include <string>

#include "offer_check.h"
#include "prompt_rate.h"

namespace {

std::string offer_with(const std::string& video_lines, bool data = true) {
  std::string sdp = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n";
  sdp += video_lines;
  sdp +=
      "m=audio 9 UDP/TLS/RTP/SAVPF 111 0\r\nc=IN IP4 0.0.0.0\r\na=recvonly\r\na=rtpmap:0 PCMU/8000\r\n"
      "a=rtpmap:111 opus/48000/2\r\n";
  if (data) sdp += "m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\n";
  return sdp;
}

const std::string kChromeVideo =
    "m=video 9 UDP/TLS/RTP/SAVPF 96 102 108\r\nc=IN IP4 0.0.0.0\r\na=recvonly\r\na=rtpmap:96 VP8/90000\r\n"
    "a=rtpmap:102 H264/90000\r\na=fmtp:102 "
    "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f\r\n"
    "a=rtpmap:108 H264/90000\r\na=fmtp:108 "
    "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f\r\n";

TEST(LiveOfferCheck, ABrowsersOfferGivesTheConstrainedBaselineOpusAndTheDataChannel) {
  h3live::Offer offer;
  const auto refusal = h3live::check_offer(offer_with(kChromeVideo), &offer);
  EXPECT_EQ(refusal.status, 0) << refusal.reason;
  EXPECT_EQ(offer.video.mline, 0);
  EXPECT_EQ(offer.video.payload, 108);  // 102 is Baseline without the constraint flags
  EXPECT_EQ(offer.audio.mline, 1);
  EXPECT_EQ(offer.audio.payload, 111);
  EXPECT_EQ(offer.data_mline, 2);
  EXPECT_EQ(offer.mlines, 3);
}

TEST(LiveOfferCheck, RefusalsNameWhatIsMissing) {
  h3live::Offer offer;
  auto r = h3live::check_offer("hello", &offer);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.reason, "the body is not an SDP offer (it must start with v=0)");
  r = h3live::check_offer(offer_with(""), &offer);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.reason, "the offer has no video m-line the viewer receives on (recvonly or sendrecv)");
  r = h3live::check_offer(offer_with("m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 VP8/90000\r\n"), &offer);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(
      r.reason,
      "the offer's video accepts no H.264 constrained baseline with packetization-mode=1 (profile-level-id "
      "42e0xx): the one encoding every viewer shares");
  r = h3live::check_offer(
      offer_with("m=video 9 UDP/TLS/RTP/SAVPF 104\r\na=rtpmap:104 H264/90000\r\n"
                 "a=fmtp:104 level-asymmetry-allowed=1;packetization-mode=0;profile-level-id=42e01f\r\n"),
      &offer);
  EXPECT_EQ(r.status, 400) << "packetization-mode=0 cannot carry the encoder's slices";
  r = h3live::check_offer(offer_with(kChromeVideo, false), &offer);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.reason,
            "the offer has no data channel (m=application): the page's channel carries the chunk times, the "
            "applied "
            "prompts and the keep-alive");
}

TEST(LiveOfferCheck, AVideoLineThatOnlySendsIsNotOneToReceiveOn) {
  std::string video = kChromeVideo;
  video.replace(video.find("a=recvonly"), 10, "a=sendonly");
  h3live::Offer offer;
  EXPECT_EQ(h3live::check_offer(offer_with(video), &offer).status, 400);
}

TEST(LivePromptRate, TwoASecondAndTheWaitUntilTheOldestLeavesTheSecond) {
  h3live::PromptRate rate(2);
  EXPECT_TRUE(rate.take(1000000));
  EXPECT_TRUE(rate.take(1300000));
  EXPECT_FALSE(rate.take(1400000));
  EXPECT_EQ(rate.wait_us(1400000), 600000);
  EXPECT_FALSE(rate.take(1999999));
  EXPECT_TRUE(rate.take(2000000));  // the first left the second before it
  EXPECT_FALSE(rate.take(2100000));
  EXPECT_EQ(rate.wait_us(2100000), 200000);
  EXPECT_TRUE(rate.take(2300000));
}

}  // namespace
