#include "dit/tp.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "common/error.h"
#include "dist/group.h"

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

void TensorParallel::all_reduce_sum(at::Tensor& t) const {
  if (size_ == 1) return;
  if (sp_size_ == 1) {
    group_->all_reduce(t, dist::ReduceOp::kSum);
    return;
  }
  // Within the TP group only: a reduce-scatter (each rank sums one slice of every peer's
  // partials, in TP order, half precision in fp32 as Group::all_reduce does) and an all-gather
  // of the sums, both as all-to-alls.
  const int world = group_->size();
  const bool in_place = t.is_contiguous();
  auto flat = in_place ? t.view({-1}) : t.contiguous().view({-1});
  const int64_t n = flat.numel();
  auto slice = [&](int r) { return flat.narrow(0, n * r / size_, n * (r + 1) / size_ - n * r / size_); };
  std::vector<at::Tensor> parts(static_cast<size_t>(world), empty_part(flat));
  for (int r = 0; r < size_; ++r) parts[static_cast<size_t>(world_rank(r, sp_rank_))] = slice(r);
  auto got = group_->all_to_all(parts);
  const auto acc = at::isReducedFloatingType(t.scalar_type()) ? at::kFloat : t.scalar_type();
  at::Tensor sum =
      got[static_cast<size_t>(world_rank(0, sp_rank_))].to(acc, /*non_blocking=*/false, /*copy=*/true);
  for (int r = 1; r < size_; ++r) sum.add_(got[static_cast<size_t>(world_rank(r, sp_rank_))]);
  sum = sum.to(t.scalar_type());
  for (int r = 0; r < size_; ++r) parts[static_cast<size_t>(world_rank(r, sp_rank_))] = sum;
  got = group_->all_to_all(parts);
  for (int r = 0; r < size_; ++r) slice(r).copy_(got[static_cast<size_t>(world_rank(r, sp_rank_))]);
  if (!in_place) t.copy_(flat.view(t.sizes()));
}

at::Tensor TensorParallel::gather_last_dim(const at::Tensor& t) const {
  if (size_ == 1) return t;
  if (sp_size_ == 1) return at::cat(group_->all_gather(t.contiguous()), -1);
  const int world = group_->size();
  std::vector<at::Tensor> parts(static_cast<size_t>(world), empty_part(t));
  for (int r = 0; r < size_; ++r) parts[static_cast<size_t>(world_rank(r, sp_rank_))] = t.contiguous();
  auto got = group_->all_to_all(parts);
  std::vector<at::Tensor> mine;
  for (int r = 0; r < size_; ++r) mine.push_back(got[static_cast<size_t>(world_rank(r, sp_rank_))]);
  return at::cat(mine, -1);
}

RowRange TensorParallel::rows_of(int64_t rows, int sp_rank) const {
  const int64_t base = rows / sp_size_, extra = rows % sp_size_;
  const int64_t s = sp_rank;
  return {s * base + std::min<int64_t>(s, extra), base + (s < extra ? 1 : 0)};
}

at::Tensor TensorParallel::gather_rows(const at::Tensor& own) const {
  if (sp_size_ == 1) return own;
  const int world = group_->size();
  std::vector<at::Tensor> parts(static_cast<size_t>(world), empty_part(own));
  for (int s = 0; s < sp_size_; ++s) parts[static_cast<size_t>(world_rank(rank_, s))] = own.contiguous();
  auto got = group_->all_to_all(parts);
  std::vector<at::Tensor> rows;
  for (int s = 0; s < sp_size_; ++s) rows.push_back(got[static_cast<size_t>(world_rank(rank_, s))]);
  return at::cat(rows, 0);
}

at::Tensor TensorParallel::rows_to_heads(const at::Tensor& qkv) const {
  const int world = group_->size();
  const int64_t heads = qkv.size(2) / sp_size_;
  std::vector<at::Tensor> parts(static_cast<size_t>(world), empty_part(qkv.narrow(2, 0, heads)));
  for (int s = 0; s < sp_size_; ++s) {
    parts[static_cast<size_t>(world_rank(rank_, s))] = qkv.narrow(2, s * heads, heads).contiguous();
  }
  auto got = group_->all_to_all(parts);
  std::vector<at::Tensor> all;
  for (int s = 0; s < sp_size_; ++s) all.push_back(got[static_cast<size_t>(world_rank(rank_, s))]);
  return at::cat(all, 0);
}

at::Tensor TensorParallel::heads_to_rows(const at::Tensor& o, int64_t rows) const {
  const int world = group_->size();
  std::vector<at::Tensor> parts(static_cast<size_t>(world), empty_part(o));
  for (int s = 0; s < sp_size_; ++s) {
    const RowRange r = rows_of(rows, s);
    parts[static_cast<size_t>(world_rank(rank_, s))] = o.narrow(0, r.begin, r.count).contiguous();
  }
  auto got = group_->all_to_all(parts);
  std::vector<at::Tensor> heads;
  for (int s = 0; s < sp_size_; ++s) heads.push_back(got[static_cast<size_t>(world_rank(rank_, s))]);
  return at::cat(heads, -1);
}

}  // namespace h3::dit
