#include "engine/scheduler/scheduler.h"

#include <algorithm>
#include <tuple>

namespace h3::engine_detail {

Turn next_turn(const std::vector<SessionView>& sessions, size_t pending, bool closing, double now_s) {
  const SessionView* owner_done = nullptr;
  const SessionView* live = nullptr;
  double live_due = 0;  // live's deadline, a past one counted as now
  const SessionView* other = nullptr;
  for (const SessionView& s : sessions) {
    switch (s.state) {
      case SessionView::State::kOwnerDone:
        if (!owner_done || s.admitted < owner_done->admitted) owner_done = &s;
        break;
      case SessionView::State::kReady:
        if (s.live) {
          const double due = std::max(s.deadline_s, now_s);
          if (!live ||
              std::tie(due, s.last_turn, s.admitted) < std::tie(live_due, live->last_turn, live->admitted)) {
            live = &s;
            live_due = due;
          }
        } else if (!other ||
                   std::tie(s.last_turn, s.admitted) < std::tie(other->last_turn, other->admitted)) {
          other = &s;
        }
        break;
      case SessionView::State::kAwaitingCaller: break;
    }
  }
  Turn t;
  if (owner_done) {
    t.kind = Turn::Kind::kResume;
    t.session = owner_done->id;
    t.owner_turn_done = true;
  } else if (pending > 0 && !closing) {
    t.kind = Turn::Kind::kAdmit;
  } else if (live || other) {
    t.kind = Turn::Kind::kResume;
    t.session = live ? live->id : other->id;
  } else if (closing && sessions.empty()) {
    t.kind = Turn::Kind::kStop;
  }
  return t;
}

double live_deadline(double admitted_s, int64_t chunks_handed_over, double first_hand_over_s) {
  if (chunks_handed_over <= 0) return admitted_s;
  return first_hand_over_s + static_cast<double>(chunks_handed_over) * kChunkSeconds;
}

}  // namespace h3::engine_detail
