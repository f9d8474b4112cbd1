#include "dit/tp.h"

#include <ATen/ATen.h>

#include "dist/group.h"

namespace h3::dit {

TensorParallel::TensorParallel(dist::Group* group) : group_(group) {
  if (group_) {
    rank_ = group_->rank();
    size_ = group_->size();
  }
}

void TensorParallel::all_reduce_sum(at::Tensor& t) const {
  if (size_ > 1) group_->all_reduce(t, dist::ReduceOp::kSum);
}

at::Tensor TensorParallel::gather_last_dim(const at::Tensor& t) const {
  if (size_ == 1) return t;
  return at::cat(group_->all_gather(t.contiguous()), -1);
}

}  // namespace h3::dit
