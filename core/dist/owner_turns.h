// Who runs Group::run_on_owner on this thread. By default the group itself: the owner runs the
// work while its peers wait for it (group.h). A thread that is one of several sessions taking
// turns at one rank's group (the engine's concurrent requests, engine/scheduler/session.h) installs its own
// implementation for as long as it runs, so that waiting for the owner gives the rank to another
// session instead of blocking it. Nothing changes for other threads.
#pragma once

#include <functional>

namespace h3::dist {

class Group;

class OwnerTurns {
 public:
  virtual ~OwnerTurns() = default;
  // Stands in for g.run_on_owner(owner, work, what), with the same contract towards the caller:
  // every rank calls it at the same point, the owner runs `work` (what it throws reaches the
  // owner's caller), and no rank leaves before the owner finished.
  virtual void run(Group& g, int owner, const std::function<void()>& work, const char* what) = 0;
};

// Installs `turns` on the calling thread while it lives; the one it replaced comes back after.
class OwnerTurnsScope {
 public:
  explicit OwnerTurnsScope(OwnerTurns* turns);
  ~OwnerTurnsScope();
  OwnerTurnsScope(const OwnerTurnsScope&) = delete;
  OwnerTurnsScope& operator=(const OwnerTurnsScope&) = delete;

 private:
  OwnerTurns* previous_;
};

// The calling thread's implementation; null: the group's own.
OwnerTurns* current_owner_turns();

}  // namespace h3::dist
