// A live causal stream keeping pace (the `pace` property, docs/element.md "Keeping pace"): when
// its chunks come later and later against real time, it lowers the forwards per chunk by one
// (4 -> 3 -> 2, not below `min_steps`), and when it has caught up and a chunk at one more forward
// would still fit in a chunk's period, it goes back up, one at a time, to the requested steps. The
// lateness of each chunk (how long after its first frame's running time it was ready; negative:
// before) is the element's own measure (live_timing.h) or, when larger, what downstream's QoS
// events said since the previous chunk. Pure arithmetic on nanoseconds: no GStreamer, no clock of
// its own, so that `h3 bench live --pace` runs the very same decisions on its emulated clock.
//
// Hysteresis (why it does not flap): a lowering needs `late_chunks` chunks in a row that are more
// than `late_ns` late, all made with the current count (the chunks made before a change took
// effect are not counted: they say nothing of the new count); a raise needs `ahead_chunks` chunks
// in a row that are not late at all AND a production time that, scaled to one more forward
// ((steps + 2) / (steps + 1): the commit forward counted, the decode's fixed part taken as if it
// scaled too, which overestimates), fits in `headroom` of a chunk's period. So a count that cannot
// keep pace is not tried again while the chunks' time says so, and a raise that fails anyway
// (a busier machine) costs `late_chunks` late chunks before it is undone. While a change is asked
// and not yet taken by the engine, nothing more is decided.
// Not thread-safe: its owner serialises the calls (Lifecycle holds it under a lock).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace h3gst {

struct PaceSettings {
  int64_t steps = 4;              // the requested forwards per chunk: the most it goes up to
  int64_t min_steps = 2;          // the fewest it goes down to
  int64_t period_ns = 708333333;  // a chunk's duration in the stream (17 frames at 24 fps)
  int64_t late_ns = 250000000;    // late: ready more than this after its running time
  int late_chunks = 2;            // late chunks in a row before one fewer forward
  int ahead_chunks = 6;           // on-time chunks in a row before one more forward
  double headroom = 0.9;          // the share of a period the next count must fit in
};

struct PaceDecision {
  int64_t steps = 0;        // forwards per chunk to ask for
  int64_t lateness_ns = 0;  // the lateness of the chunk that decided it (negative: ahead)
  std::string reason;       // "late", "downstream" (a QoS event's lateness decided) or "caught up"
};

class PacePolicy {
 public:
  explicit PacePolicy(const PaceSettings& settings);

  // A QoS event from downstream said a buffer was `lateness_ns` late (negative: early): the
  // largest since the previous chunk joins that chunk's lateness.
  void downstream(int64_t lateness_ns);
  // Chunk `chunk`'s first frame was ready `lateness_ns` after its running time (negative:
  // before; none: a stream that is not live has no lateness of its own, and is judged on
  // downstream's alone); the latest chunk took `production_ns` to make (0: unknown). A decision to
  // ask the engine for, or none.
  std::optional<PaceDecision> observe(int64_t chunk, std::optional<int64_t> lateness_ns,
                                      int64_t production_ns);
  // The engine made chunks from `chunk` on with `steps` forwards (its Phase::kSteps report).
  void applied(int64_t chunk, int64_t steps);

  int64_t steps() const { return steps_; }  // the count in effect
  const PaceSettings& settings() const { return s_; }
  bool asking() const { return asked_ != 0; }

 private:
  const PaceSettings s_;
  int64_t steps_;
  int64_t asked_ = 0;                  // a change asked and not yet applied; 0: none
  int64_t counts_from_ = 0;            // the first chunk made with steps_
  int late_ = 0, ahead_ = 0;           // chunks in a row
  std::optional<int64_t> downstream_;  // the largest QoS lateness since the last chunk
};

}  // namespace h3gst
