#include "dist/agree.h"

#include <ATen/ATen.h>

#include "h3/error.h"

namespace h3::dist {

Owner agree_owner(Group& g, bool i_supply_consumer) {
  // One collective: a one-hot row per rank, summed, tells every rank who supplies.
  at::Tensor who = at::zeros({g.size()}, at::TensorOptions().dtype(at::kLong).device(g.device()));
  if (i_supply_consumer) who[g.rank()] = 1;
  g.all_reduce(who, ReduceOp::kSum);
  at::Tensor host = who.cpu();
  const int64_t* p = host.data_ptr<int64_t>();
  Owner owner{0, -1};
  std::string suppliers;
  for (int r = 0; r < g.size(); ++r) {
    if (p[r] == 0) continue;
    if (owner.rank < 0) owner.rank = r;
    ++owner.count;
    suppliers += (suppliers.empty() ? "" : ", ") + std::to_string(r);
  }
  if (owner.count == 1 && owner.rank == 0) return owner;
  // Built only from agreed values: the same text on every rank.
  std::string msg;
  if (owner.count == 0) {
    msg = "no rank supplies the consumer (ChunkSink): pass it to rank 0 of the " + std::to_string(g.size()) +
          " ranks";
  } else if (owner.count > 1) {
    msg = std::to_string(owner.count) + " ranks (" + suppliers +
          ") supply a consumer (ChunkSink): exactly one, rank 0, may";
  } else {
    msg = "the consumer (ChunkSink) is supplied on rank " + std::to_string(owner.rank) +
          ", but only rank 0 may own it: pass it to rank 0";
  }
  throw Error(ErrorKind::kInvalidArgument, msg);
}

ErrorAgreement agree_error(Group& g, const std::optional<std::string>& my_error) {
  // max over (size - rank) of failing ranks picks the lowest failing rank.
  const int64_t key = my_error ? g.size() - g.rank() : 0;
  const int64_t best = g.all_reduce_int(key, ReduceOp::kMax);
  ErrorAgreement a;
  if (best == 0) return a;
  a.failed = true;
  a.rank = static_cast<int>(g.size() - best);
  a.message = g.broadcast_string(a.rank == g.rank() ? *my_error : std::string(), a.rank);
  return a;
}

bool agree_cancel(Group& g, bool cancel_requested_here) {
  return g.all_reduce_int(cancel_requested_here ? 1 : 0, ReduceOp::kMax) != 0;
}

void throw_agreed(const ErrorAgreement& a, int my_rank) {
  if (!a.failed) throw Error(ErrorKind::kInternal, "throw_agreed called although no rank failed");
  if (a.rank == my_rank) throw Error(ErrorKind::kDistributed, a.message);
  throw Error(ErrorKind::kDistributed, "rank " + std::to_string(a.rank) + " failed: " + a.message);
}

void LocalFailure::set(std::exception_ptr e) {
  exception = std::move(e);
  if (!exception) return;
  try {
    std::rethrow_exception(exception);
  } catch (const std::exception& x) {
    message = x.what();
  } catch (...) {
    message = "unknown exception";
  }
}

void agree_or_throw(Group& g, const LocalFailure& mine) {
  const ErrorAgreement a = agree_error(g, mine.message);
  if (!a.failed) return;
  if (a.rank == g.rank() && mine.exception) std::rethrow_exception(mine.exception);
  throw_agreed(a, g.rank());
}

}  // namespace h3::dist
