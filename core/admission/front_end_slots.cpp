#include "admission/front_end_slots.h"

#include <algorithm>

namespace h3::dist {

std::string source_of(const IpAddress& a) {
  if (a.family != AF_INET6) return a.str();
  IpAddress prefix = a;
  std::fill(prefix.bytes.begin() + 8, prefix.bytes.end(), 0);
  return prefix.str() + "/64";
}

int FrontEndSlots::unproven_from(const std::string& source) const {
  const auto it = per_source_.find(source);
  return it == per_source_.end() ? 0 : it->second;
}

void FrontEndSlots::drop_unproven(std::list<Entry>::iterator it) {
  if (--per_source_[it->source] == 0) per_source_.erase(it->source);
  open_.erase(it->id);
  unproven_.erase(it);
}

FrontEndSlots::Decision FrontEndSlots::arrive(uint64_t id, const std::string& source, Clock::time_point now) {
  Decision d;
  const int mine = unproven_from(source);
  if (mine >= limits_.per_source) {
    d.admit = Admit::kSourceFull;
    return d;
  }
  if (unproven() >= limits_.unproven) {
    // The place of the oldest settled connection of the busiest address, if that address holds
    // more than the newcomer's does.
    auto victim = unproven_.end();
    int victim_count = mine;
    for (auto it = unproven_.begin(); it != unproven_.end(); ++it) {
      const int count = unproven_from(it->source);
      if (now - it->since >= limits_.settle && count > victim_count) {
        victim = it;
        victim_count = count;
      }
    }
    if (victim == unproven_.end()) {
      d.admit = Admit::kFull;
      return d;
    }
    d.evicted = victim->id;
    drop_unproven(victim);
  }
  unproven_.push_back(Entry{id, source, now});
  ++per_source_[source];
  open_[id] = false;
  return d;
}

FrontEndSlots::Proved FrontEndSlots::prove(uint64_t id) {
  const auto it =
      std::find_if(unproven_.begin(), unproven_.end(), [&](const Entry& e) { return e.id == id; });
  if (it == unproven_.end()) return Proved::kEvicted;
  drop_unproven(it);
  if (proven_ >= limits_.proven) return Proved::kFull;
  ++proven_;
  open_[id] = true;
  return Proved::kProven;
}

void FrontEndSlots::leave(uint64_t id) {
  const auto o = open_.find(id);
  if (o == open_.end()) return;
  if (o->second) {
    --proven_;
    open_.erase(o);
    return;
  }
  const auto it =
      std::find_if(unproven_.begin(), unproven_.end(), [&](const Entry& e) { return e.id == id; });
  if (it != unproven_.end()) drop_unproven(it);
}

}  // namespace h3::dist
