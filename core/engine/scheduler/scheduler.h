// Which request runs next on the engine's ranks (docs/engine.md, "Many streams"): rank 0's
// choice among the sessions in flight, each paused where it waits for rank 0's caller (a step's
// report, a chunk's hand-over), and the requests offered but not yet admitted. Pure: rank 0's
// serving loop (rank_server.cpp) builds the views, asks, and broadcasts the answer, so that every
// rank gives its turns to the same sessions in the same order. Torch-free.
//
// The policy, in order:
//  1. a session whose owner turn rank 0 has just finished continues at once: its peers wait for
//     it, and the continuation is the very step or chunk whose hand-over just ended;
//  2. an offered request is admitted (it runs until its first hand-over: a new stream's first
//     frame does not wait behind long-running ones);
//  3. live sessions (causal streams, whose chunks play at 24 fps) whose caller answered, earliest
//     deadline first: the time their next chunk is due. A deadline already past counts as now:
//     late streams (the ranks are slower than real time for all of them) take turns round robin,
//     the one whose last turn is the oldest first, so that a stream admitted while the others are
//     late gets its first frames at once instead of after they all ended (plain EDF's overload);
//  4. the others whose caller answered (euler requests, decodes), the one whose last turn is the
//     oldest first (round robin, one step or chunk hand-over per turn).
// Other ties go to the earlier admitted session. Live sessions come before the others whenever one is
// ready: while live streams keep the ranks busy, an euler request waits (its turn comes when every
// live stream waits for its consumer, which a stream ahead of its clock does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace h3::engine_detail {

// Seconds of video a causal chunk holds: 17 frames at 24 fps.
constexpr double kChunkSeconds = 17.0 / 24.0;

// What rank 0 knows of a session in flight when it picks the next turn.
struct SessionView {
  enum class State {
    kAwaitingCaller,  // handed something to its caller, which has not answered yet: not runnable
    kReady,           // its caller answered: its owner turn goes on
    kOwnerDone,       // rank 0 finished its owner turn: the peers are to be released
  };
  uint64_t id = 0;
  State state = State::kAwaitingCaller;
  bool live = false;       // a causal stream
  double deadline_s = 0;   // live: when its next chunk is due, on rank 0's clock (live_deadline)
  uint64_t admitted = 0;   // admission order: smaller is earlier
  uint64_t last_turn = 0;  // the scheduler's tick of its last turn
};

struct Turn {
  enum class Kind {
    kWait,    // nothing can run: wait for an answer, an offer or close
    kStop,    // the engine closes and no session is in flight
    kAdmit,   // admit the oldest offered request
    kResume,  // give the turn to `session`
  };
  Kind kind = Kind::kWait;
  uint64_t session = 0;          // kResume
  bool owner_turn_done = false;  // kResume: rank 0 finished the owner turn; the peers go on
};

// `pending`: requests offered and not admitted; `closing`: the engine closes (nothing more is
// admitted; kStop once no session remains); `now_s`: rank 0's clock (live_deadline's).
Turn next_turn(const std::vector<SessionView>& sessions, size_t pending, bool closing, double now_s);

// When a live stream's next chunk is due, in seconds on rank 0's clock: `admitted_s` until its
// first chunk was handed over, then that hand-over's time plus kChunkSeconds for every chunk
// handed over since.
double live_deadline(double admitted_s, int64_t chunks_handed_over, double first_hand_over_s);

}  // namespace h3::engine_detail
