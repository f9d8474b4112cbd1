#include "text/checkpoint_tensor.h"

#include <ATen/ATen.h>

#include "common/error.h"
#include "common/shape.h"

namespace h3::text {

at::Tensor checked_view(const io::Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape,
                        const std::string& part) {
  const io::TensorInfo* info = ck.find(name);
  if (!info) {
    throw Error(ErrorKind::kNotFound, ck.path() + ": tensor '" + name +
                                          "' is missing: the checkpoint does not hold " + part +
                                          " its config.json describes");
  }
  if (info->shape != shape) {
    throw Error(ErrorKind::kMismatch, ck.file_of(name)->path() + ": tensor '" + name + "' is " +
                                          shape_string(info->shape) + " but config.json implies " +
                                          shape_string(shape));
  }
  return ck.view(name);
}

at::Tensor owned_copy(const at::Tensor& v, const at::TensorOptions& options) {
  at::Tensor out = at::empty(v.sizes(), options);
  out.copy_(v);
  return out;
}

}  // namespace h3::text
