// The pace policy alone (gst/pace_policy.h): sequences of chunk latenesses and production times
// and the step counts it asks for — down one at a time after `late_chunks` late chunks made at
// the current count, never below min_steps, up again only when on time with room for one more
// forward, never above the requested steps; the chunks made before a change took effect and those
// while a change is on its way are not judged; downstream QoS counts when it is the later word.
#include "pace_policy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace h3gst {
namespace {

constexpr int64_t kMs = 1000000;

PaceSettings settings() {
  PaceSettings s;
  s.steps = 4;
  s.min_steps = 2;
  s.period_ns = 700 * kMs;
  s.late_ns = 250 * kMs;
  s.late_chunks = 2;
  s.ahead_chunks = 3;
  s.headroom = 0.9;
  return s;
}

// Feeds chunks `from`.. with the latenesses given (production 1 s: never room to go up); returns
// the decisions as "chunk:steps:reason".
std::vector<std::string> feed(PacePolicy& p, int64_t from, const std::vector<int64_t>& late_ms,
                              int64_t production_ms = 1000) {
  std::vector<std::string> out;
  for (size_t i = 0; i < late_ms.size(); ++i) {
    const int64_t chunk = from + static_cast<int64_t>(i);
    if (auto d = p.observe(chunk, late_ms[i] * kMs, production_ms * kMs)) {
      out.push_back(std::to_string(chunk) + ":" + std::to_string(d->steps) + ":" + d->reason);
    }
  }
  return out;
}

TEST(PacePolicy, LowersOneStepAfterTwoLateChunksAndWaitsForTheChangeBeforeJudgingAgain) {
  PacePolicy p(settings());
  // One late chunk, then an on-time one: the run is broken, nothing asked.
  EXPECT_TRUE(feed(p, 1, {300, 100}).empty());
  // Two late in a row: one fewer forward, with the lateness of the chunk that decided it.
  const auto d = feed(p, 3, {300, 400});
  EXPECT_EQ(d, std::vector<std::string>{"4:3:late"});
  EXPECT_TRUE(p.asking());
  EXPECT_EQ(p.steps(), 4) << "in effect only once the engine says so";
  // While asked and not applied: nothing more, however late.
  EXPECT_TRUE(feed(p, 5, {900, 1000, 1100}).empty());
  // The engine took 3 from chunk 9: chunks 8 (made with 4) is not judged; 9 and 10 are.
  p.applied(9, 3);
  EXPECT_FALSE(p.asking());
  EXPECT_EQ(p.steps(), 3);
  EXPECT_TRUE(feed(p, 8, {1200}).empty());
  EXPECT_EQ(feed(p, 9, {1300, 1400}), std::vector<std::string>{"10:2:late"});
}

TEST(PacePolicy, NeverGoesBelowMinStepsNorAboveTheRequestedSteps) {
  PacePolicy p(settings());
  ASSERT_EQ(feed(p, 1, {500, 500}), std::vector<std::string>{"2:3:late"});
  p.applied(3, 3);
  ASSERT_EQ(feed(p, 3, {500, 500}), std::vector<std::string>{"4:2:late"});
  p.applied(5, 2);
  EXPECT_TRUE(feed(p, 5, std::vector<int64_t>(20, 2000)).empty()) << "2 is the floor";
  EXPECT_EQ(p.steps(), 2);
  // Back up to 4, then no higher, however much room there is.
  ASSERT_EQ(feed(p, 25, {-500, -500, -500}, 100), std::vector<std::string>{"27:3:caught up"});
  p.applied(28, 3);
  ASSERT_EQ(feed(p, 28, {-500, -500, -500}, 100), std::vector<std::string>{"30:4:caught up"});
  p.applied(31, 4);
  EXPECT_TRUE(feed(p, 31, std::vector<int64_t>(20, -500), 100).empty()) << "4 is the ceiling";
}

TEST(PacePolicy, GoesBackUpOnlyWhenOnTimeWithRoomForOneMoreForward) {
  PacePolicy p(settings());
  ASSERT_EQ(feed(p, 1, {500, 500}), std::vector<std::string>{"2:3:late"});
  p.applied(3, 3);
  // On time, but a chunk at 3 takes 560 ms: at 4 it would take 560 * 5/4 = 700 ms, over 90 % of
  // the 700 ms period: it stays.
  EXPECT_TRUE(feed(p, 3, std::vector<int64_t>(10, -400), 560).empty());
  // 500 ms: 625 ms at 4, within 630: up after three such chunks in a row...
  EXPECT_TRUE(feed(p, 13, {-400, -400}, 500).empty());
  // ...a late chunk breaks the run (and a slow one too)...
  EXPECT_TRUE(feed(p, 15, {10}, 500).empty());
  EXPECT_TRUE(feed(p, 16, {-400, -400}, 500).empty());
  EXPECT_TRUE(feed(p, 18, {-400}, 600).empty());
  EXPECT_TRUE(feed(p, 19, {-400, -400}, 500).empty());
  EXPECT_EQ(feed(p, 21, {-400}, 500), std::vector<std::string>{"21:4:caught up"});
  // An unknown production time never raises.
  PacePolicy q(settings());
  ASSERT_EQ(feed(q, 1, {500, 500}), std::vector<std::string>{"2:3:late"});
  q.applied(3, 3);
  EXPECT_TRUE(feed(q, 3, std::vector<int64_t>(10, -400), 0).empty());
}

TEST(PacePolicy, DownstreamQosJoinsTheNextChunkWhenItIsLater) {
  PacePolicy p(settings());
  // The element saw the chunks on time; a sink said it got them 400 ms late.
  p.downstream(100 * kMs);
  p.downstream(400 * kMs);
  EXPECT_FALSE(p.observe(1, 0, 1000 * kMs).has_value());
  p.downstream(300 * kMs);
  const auto d = p.observe(2, -10 * kMs, 1000 * kMs);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->steps, 3);
  EXPECT_EQ(d->reason, "downstream");
  EXPECT_EQ(d->lateness_ns, 300 * kMs);
  // A QoS lateness is used once: the next chunk, without one, is judged on its own.
  p.applied(3, 3);
  p.downstream(900 * kMs);
  EXPECT_FALSE(p.observe(3, 0, 1000 * kMs).has_value());
  EXPECT_FALSE(p.observe(4, 0, 1000 * kMs).has_value());
  EXPECT_FALSE(p.observe(5, 0, 1000 * kMs).has_value()) << "only one late chunk (3) in the run";
  // Earlier than the element's own: its own counts.
  p.downstream(-900 * kMs);
  EXPECT_FALSE(p.observe(6, 300 * kMs, 1000 * kMs).has_value());
  p.downstream(-900 * kMs);
  const auto own = p.observe(7, 300 * kMs, 1000 * kMs);
  ASSERT_TRUE(own.has_value());
  EXPECT_EQ(own->reason, "late");
  EXPECT_EQ(own->steps, 2);
}

TEST(PacePolicy, AStreamThatIsNotLiveIsJudgedOnDownstreamsWordAlone) {
  PacePolicy p(settings());
  // No lateness of its own and no QoS event: nothing is said of the chunk, and nothing is counted.
  p.downstream(400 * kMs);
  EXPECT_FALSE(p.observe(1, std::nullopt, 1000 * kMs).has_value());
  EXPECT_FALSE(p.observe(2, std::nullopt, 1000 * kMs).has_value()) << "a chunk without a word breaks no run";
  p.downstream(500 * kMs);
  const auto d = p.observe(3, std::nullopt, 1000 * kMs);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->steps, 3);
  EXPECT_EQ(d->reason, "downstream");
  EXPECT_EQ(d->lateness_ns, 500 * kMs);
}

}  // namespace
}  // namespace h3gst
