#include "dist/owner_turns.h"

namespace h3::dist {
namespace {

thread_local OwnerTurns* t_turns = nullptr;

}  // namespace

OwnerTurnsScope::OwnerTurnsScope(OwnerTurns* turns) : previous_(t_turns) {
  t_turns = turns;
}

OwnerTurnsScope::~OwnerTurnsScope() {
  t_turns = previous_;
}

OwnerTurns* current_owner_turns() {
  return t_turns;
}

}  // namespace h3::dist
