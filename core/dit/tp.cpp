#include "dit/tp.h"

#include <ATen/ATen.h>

#include "common/error.h"

namespace h3::dit {

// Until core/dist is merged only the single-rank case can be constructed.
TensorParallel::TensorParallel(dist::Group* group) : group_(group) {
  if (group) throw Error(ErrorKind::kInternal, "tensor parallelism needs core/dist");
}

void TensorParallel::all_reduce_sum(at::Tensor&) const {}

at::Tensor TensorParallel::gather_last_dim(const at::Tensor& t) const {
  return t;
}

}  // namespace h3::dit
