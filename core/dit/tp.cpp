#include "dit/tp.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "dist/group.h"
#include "h3/error.h"

namespace h3::dit {
namespace {

// [0, trailing...] of t's dtype: the part for a rank outside the exchange.
at::Tensor empty_part(const at::Tensor& like) {
  auto shape = like.sizes().vec();
  shape[0] = 0;
  return at::empty(shape, like.options());
}

}  // namespace

TensorParallel::TensorParallel(dist::Group* group, int sp) : group_(group) {
  const int world = group_ ? group_->size() : 1;
  if (sp < 1 || world % sp != 0) {
    throw Error(ErrorKind::kInvalidArgument, "sp = " + std::to_string(sp) + " does not divide the " +
                                                 std::to_string(world) + " ranks: tp x sp must be the ranks");
  }
  const int w = group_ ? group_->rank() : 0;
  sp_size_ = sp;
  size_ = world / sp;
  rank_ = w % size_;
  sp_rank_ = w / size_;
}

std::vector<at::Tensor> TensorParallel::exchange(Peers peers,
                                                 const std::function<at::Tensor(int)>& part) const {
  const int n = peers == Peers::kTp ? size_ : sp_size_;
  auto peer = [&](int k) {
    return static_cast<size_t>(peers == Peers::kTp ? world_rank(k, sp_rank_) : world_rank(rank_, k));
  };
  std::vector<at::Tensor> mine(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) mine[static_cast<size_t>(k)] = part(k).contiguous();
  std::vector<at::Tensor> parts(static_cast<size_t>(group_->size()), empty_part(mine[0]));
  for (int k = 0; k < n; ++k) parts[peer(k)] = mine[static_cast<size_t>(k)];
  const auto got = group_->all_to_all(parts);
  std::vector<at::Tensor> out;
  for (int k = 0; k < n; ++k) out.push_back(got[peer(k)]);
  return out;
}

void TensorParallel::all_reduce_sum(at::Tensor& t) const {
  if (size_ == 1) return;
  if (sp_size_ == 1) {
    group_->all_reduce(t, dist::ReduceOp::kSum);
    return;
  }
  // Within the TP group only: a reduce-scatter (each rank sums one slice of every peer's
  // partials, in TP order, half precision in fp32 as Group::all_reduce does) and an all-gather
  // of the sums, both as all-to-alls.
  const bool in_place = t.is_contiguous();
  auto flat = in_place ? t.view({-1}) : t.contiguous().view({-1});
  const int64_t n = flat.numel();
  auto slice = [&](int r) { return flat.narrow(0, n * r / size_, n * (r + 1) / size_ - n * r / size_); };
  const auto partials = exchange(Peers::kTp, slice);
  const auto acc = at::isReducedFloatingType(t.scalar_type()) ? at::kFloat : t.scalar_type();
  at::Tensor sum = partials[0].to(acc, /*non_blocking=*/false, /*copy=*/true);
  for (int r = 1; r < size_; ++r) sum.add_(partials[static_cast<size_t>(r)]);
  sum = sum.to(t.scalar_type());
  const auto sums = exchange(Peers::kTp, [&](int) { return sum; });
  for (int r = 0; r < size_; ++r) slice(r).copy_(sums[static_cast<size_t>(r)]);
  if (!in_place) t.copy_(flat.view(t.sizes()));
}

at::Tensor TensorParallel::gather_last_dim(const at::Tensor& t) const {
  if (size_ == 1) return t;
  if (sp_size_ == 1) return at::cat(group_->all_gather(t.contiguous()), -1);
  return at::cat(exchange(Peers::kTp, [&](int) { return t; }), -1);
}

RowRange TensorParallel::rows_of(int64_t rows, int sp_rank) const {
  const int64_t base = rows / sp_size_, extra = rows % sp_size_;
  const int64_t s = sp_rank;
  return {s * base + std::min<int64_t>(s, extra), base + (s < extra ? 1 : 0)};
}

at::Tensor TensorParallel::gather_rows(const at::Tensor& own) const {
  if (sp_size_ == 1) return own;
  return at::cat(exchange(Peers::kSp, [&](int) { return own; }), 0);
}

at::Tensor TensorParallel::rows_to_heads(const at::Tensor& qkv) const {
  const int64_t heads = qkv.size(2) / sp_size_;
  return at::cat(exchange(Peers::kSp, [&](int s) { return qkv.narrow(2, s * heads, heads); }), 0);
}

at::Tensor TensorParallel::heads_to_rows(const at::Tensor& o, int64_t rows) const {
  return at::cat(exchange(Peers::kSp,
                          [&](int s) {
                            const RowRange r = rows_of(rows, s);
                            return o.narrow(0, r.begin, r.count);
                          }),
                 -1);
}

}  // namespace h3::dit
