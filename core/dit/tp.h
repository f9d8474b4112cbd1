// This rank's place in the DiT's tensor-parallel group: the two collectives the forward needs.
// A null group means one rank holding every weight whole.
#pragma once

#include <ATen/core/Tensor.h>

namespace h3::dist {
class Group;
}

namespace h3::dit {

class TensorParallel {
 public:
  explicit TensorParallel(dist::Group* group = nullptr);
  int rank() const { return rank_; }
  int size() const { return size_; }
  dist::Group* group() const { return group_; }

  // Sums the row-parallel partial outputs of every rank, in place.
  void all_reduce_sum(at::Tensor& t) const;
  // Concatenates every rank's column-parallel output along the last dimension, in rank order.
  at::Tensor gather_last_dim(const at::Tensor& t) const;

 private:
  dist::Group* group_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace h3::dit
