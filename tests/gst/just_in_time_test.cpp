// JustInTime (gst/just_in_time.h): when h3src with queue-chunks=0 on a live stream lets the engine
// begin its next chunk.
#include "just_in_time.h"

#include <gtest/gtest.h>

#include <chrono>

namespace {

using h3gst::JustInTime;
using std::chrono::milliseconds;
using Clock = JustInTime::Clock;

// 24 frames a second, rounded to the millisecond for readable sums.
constexpr milliseconds kFrame{42};

TEST(JustInTime, BeginsAtOnceUntilAChunkWasQueuedAndAProductionMeasured) {
  JustInTime j(kFrame);
  EXPECT_EQ(j.lead(), Clock::duration::zero());
  EXPECT_EQ(j.begin_next(), Clock::time_point{});
  const Clock::time_point t0 = Clock::now();
  j.queued(t0, 17);
  EXPECT_EQ(j.begin_next(), Clock::time_point{}) << "no production measured yet";
  JustInTime k(kFrame);
  k.produced(milliseconds(100));
  EXPECT_EQ(k.begin_next(), Clock::time_point{}) << "no chunk queued yet";
}

TEST(JustInTime, TheNextChunkBeginsItsLeadBeforeTheQueuedOneIsUsedUp) {
  JustInTime j(kFrame);
  const Clock::time_point t0 = Clock::now();
  j.produced(milliseconds(200));
  // The slowest production, a quarter more, two frames: 200 + 50 + 84.
  EXPECT_EQ(j.lead(), milliseconds(334));
  j.queued(t0, 17);  // used up 17 * 42 = 714 ms later
  EXPECT_EQ(j.begin_next(), t0 + milliseconds(714 - 334));
  // A chunk queued later moves the time on by its own length.
  j.queued(t0 + milliseconds(714), 5);
  EXPECT_EQ(j.begin_next(), t0 + milliseconds(714 + 5 * 42 - 334));
}

TEST(JustInTime, TheLeadIsTheSlowestOfTheLastSixteenProductions) {
  JustInTime j(kFrame);
  j.produced(milliseconds(400));  // a chunk that also encoded a new prompt
  for (int i = 0; i < 15; ++i) j.produced(milliseconds(100));
  EXPECT_EQ(j.lead(), milliseconds(400 + 100 + 84)) << "remembered for sixteen productions";
  j.produced(milliseconds(120));
  EXPECT_EQ(j.lead(), milliseconds(120 + 30 + 84)) << "forgotten after sixteen more";
}

}  // namespace
