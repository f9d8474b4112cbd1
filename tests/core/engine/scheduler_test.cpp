// The order in which the engine's ranks give their turns to the requests in flight
// (engine/scheduler/scheduler.h): the exact turns for given states, deadlines and histories.
#include "engine/scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace h3::engine_detail {
namespace {

using State = SessionView::State;

SessionView session(uint64_t id, State state, bool live = false, double deadline = 0,
                    uint64_t last_turn = 0) {
  SessionView v;
  v.id = id;
  v.state = state;
  v.live = live;
  v.deadline_s = deadline;
  v.admitted = id;
  v.last_turn = last_turn;
  return v;
}

// A clock before every deadline of these tests: no live stream is late.
constexpr double kNoneLate = -1e9;

std::string describe(const Turn& t) {
  switch (t.kind) {
    case Turn::Kind::kWait: return "wait";
    case Turn::Kind::kStop: return "stop";
    case Turn::Kind::kAdmit: return "admit";
    case Turn::Kind::kResume:
      return "resume " + std::to_string(t.session) + (t.owner_turn_done ? " done" : "");
  }
  return "?";
}

TEST(Scheduler, AnOwnerTurnJustDoneGoesOnBeforeAdmissionsAndReadySessions) {
  const std::vector<SessionView> s = {session(1, State::kReady, true, -5.0), session(2, State::kOwnerDone),
                                      session(3, State::kReady)};
  EXPECT_EQ(describe(next_turn(s, 4, false, kNoneLate)), "resume 2 done");
}

TEST(Scheduler, AnOfferedRequestIsAdmittedBeforeReadySessionsButNotWhileClosing) {
  const std::vector<SessionView> s = {session(1, State::kReady, true, -5.0), session(2, State::kReady)};
  EXPECT_EQ(describe(next_turn(s, 1, false, kNoneLate)), "admit");
  EXPECT_EQ(describe(next_turn(s, 1, true, kNoneLate)), "resume 1");
  EXPECT_EQ(describe(next_turn({}, 1, true, kNoneLate)), "stop");
}

TEST(Scheduler, LiveStreamsGoByEarliestDeadlineThenAdmissionOrder) {
  const std::vector<SessionView> s = {
      session(1, State::kReady, true, 3.0), session(2, State::kReady, true, 1.5),
      session(3, State::kReady, true, 1.5), session(4, State::kReady, true, 0.5)};
  EXPECT_EQ(describe(next_turn(s, 0, false, kNoneLate)), "resume 4");
  std::vector<SessionView> without_4(s.begin(), s.end() - 1);
  EXPECT_EQ(describe(next_turn(without_4, 0, false, kNoneLate)), "resume 2")
      << "a tie goes to the earlier admitted";
}

TEST(Scheduler, LiveStreamsGoBeforeOthersAndOthersTakeTurnsRoundRobin) {
  std::vector<SessionView> s = {session(1, State::kReady, false, 0, 7),
                                session(2, State::kReady, false, 0, 3),
                                session(3, State::kReady, true, 100.0, 9)};
  EXPECT_EQ(describe(next_turn(s, 0, false, kNoneLate)), "resume 3") << "however late its deadline";
  s[2].state = State::kAwaitingCaller;
  EXPECT_EQ(describe(next_turn(s, 0, false, kNoneLate)), "resume 2") << "its last turn is the oldest";
  s[1].last_turn = 10;
  EXPECT_EQ(describe(next_turn(s, 0, false, kNoneLate)), "resume 1");
}

TEST(Scheduler, SessionsWaitingForTheirCallersAreNeverPicked) {
  const std::vector<SessionView> s = {session(1, State::kAwaitingCaller, true, -100.0),
                                      session(2, State::kAwaitingCaller)};
  EXPECT_EQ(describe(next_turn(s, 0, false, kNoneLate)), "wait");
  EXPECT_EQ(describe(next_turn(s, 0, true, kNoneLate)), "wait") << "closing waits for the sessions in flight";
  EXPECT_EQ(describe(next_turn({}, 0, false, kNoneLate)), "wait");
}

// Three live streams and an euler request over several turns, each turn's session then waiting
// for its caller, who answers at once; a live stream's deadline moves by a chunk each time it
// hands one over.
TEST(Scheduler, TheTurnsOfThreeLiveStreamsAndAnEulerRequestComeInTheirStatedOrder) {
  std::vector<SessionView> s = {session(1, State::kReady, true, 0.0), session(2, State::kReady, true, 0.3),
                                session(3, State::kReady, true, 0.6), session(4, State::kReady)};
  std::vector<std::string> order;
  uint64_t tick = 0;
  for (int i = 0; i < 8; ++i) {
    const Turn t = next_turn(s, 0, false, kNoneLate);
    order.push_back(describe(t));
    ASSERT_EQ(t.kind, Turn::Kind::kResume);
    SessionView& v = s[t.session - 1];
    v.last_turn = ++tick;
    if (v.live) v.deadline_s += kChunkSeconds;
    // Streams 1..3 stop at 1.5 s: their consumers' queues are full.
    if (v.live && v.deadline_s > 1.5) v.state = State::kAwaitingCaller;
  }
  EXPECT_EQ(order, (std::vector<std::string>{"resume 1", "resume 2", "resume 3", "resume 1", "resume 2",
                                             "resume 3", "resume 1", "resume 4"}));
}

// The ranks are slower than real time: every running stream is late. A deadline already past
// counts as now, so the late streams take turns round robin (oldest last turn first) and a stream
// admitted meanwhile (due at its admission, also past) gets its turn at once instead of waiting
// for the others to end; a stream not late yet comes after the late ones.
TEST(Scheduler, LateLiveStreamsTakeTurnsRoundRobinAndANewcomerIsNotStarved) {
  std::vector<SessionView> s = {
      session(1, State::kReady, true, 1.0, 5), session(2, State::kReady, true, 2.0, 6),
      session(3, State::kReady, true, 9.0, 0), session(4, State::kReady, true, 10.5, 1)};
  const double now = 10.0;
  std::vector<std::string> order;
  uint64_t tick = 6;
  for (int i = 0; i < 5; ++i) {
    const Turn t = next_turn(s, 0, false, now);
    order.push_back(describe(t));
    ASSERT_EQ(t.kind, Turn::Kind::kResume);
    s[t.session - 1].last_turn = ++tick;  // still late after its turn: the ranks are behind
  }
  EXPECT_EQ(order, (std::vector<std::string>{"resume 3", "resume 1", "resume 2", "resume 3", "resume 1"}));
  // Once nothing is late, plain earliest deadline first.
  EXPECT_EQ(describe(next_turn(s, 0, false, 0.5)), "resume 1");
}

TEST(Scheduler, ALiveStreamIsDueAtAdmissionThenEveryChunkAfterItsFirstHandOver) {
  EXPECT_DOUBLE_EQ(live_deadline(2.0, 0, 0.0), 2.0);
  EXPECT_DOUBLE_EQ(live_deadline(2.0, 1, 5.0), 5.0 + 17.0 / 24.0);
  EXPECT_DOUBLE_EQ(live_deadline(2.0, 4, 5.0), 5.0 + 4 * 17.0 / 24.0);
}

}  // namespace
}  // namespace h3::engine_detail
