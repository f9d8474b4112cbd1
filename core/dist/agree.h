// Collective agreement: decisions that change control flow are taken from
// values every rank has seen, so every rank takes the same branch. Each
// helper is one or two small collectives; call them at the same point on
// every rank.
#pragma once

#include <exception>
#include <optional>
#include <string>

#include "dist/group.h"

namespace h3::dist {

// Which rank supplies a consumer (the ChunkSink): every rank learns how many
// ranks supply one and the lowest such rank. Unless exactly one does and it
// is rank 0, every rank throws the same h3::Error(kInvalidArgument).
struct Owner {
  int count;
  int rank;  // the lowest supplying rank, -1 when none
};
Owner agree_owner(Group& g, bool i_supply_consumer);

// Each rank contributes ok (nullopt) or its error message; all learn the
// lowest failing rank and that rank's message.
struct ErrorAgreement {
  bool failed = false;
  int rank = -1;
  std::string message;
};
ErrorAgreement agree_error(Group& g, const std::optional<std::string>& my_error);

// True on every rank if any rank asked to cancel (the element is flushing).
bool agree_cancel(Group& g, bool cancel_requested_here);

// What one rank brings to an agreement: nothing (ok), or its error message
// and the exception to rethrow on that rank.
struct LocalFailure {
  std::optional<std::string> message;
  std::exception_ptr exception;
  // Records the exception being handled (call inside a catch block).
  void capture() { set(std::current_exception()); }
  // Records `e`; a null `e` leaves this ok.
  void set(std::exception_ptr e);
  explicit operator bool() const { return message.has_value(); }
};

// agree_error on `mine`; when any rank failed, every rank leaves together:
// the failing rank rethrows its own exception, the others throw
// h3::Error(kDistributed, "rank R failed: <message>"). Call at the same point
// on every rank.
void agree_or_throw(Group& g, const LocalFailure& mine);

// Throws the agreed failure: on peers h3::Error(kDistributed, "rank R failed:
// <message>"); on the failing rank itself the same text (a caller holding the
// original exception rethrows that instead). Throws h3::Error(kInternal) if
// nothing failed.
[[noreturn]] void throw_agreed(const ErrorAgreement& a, int my_rank);

}  // namespace h3::dist
