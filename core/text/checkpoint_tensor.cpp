#include "text/checkpoint_tensor.h"

#include <ATen/ATen.h>

#include <vector>

#include "common/shape.h"
#include "h3/error.h"

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

at::Tensor rank_part(const at::Tensor& v, const std::string& name, const std::vector<int64_t>& shape,
                     io::Split split, int64_t parts, int rank, int size) {
  switch (split) {
    case io::Split::kReplicated: return v;
    case io::Split::kColumn: {
      const int64_t part = shape[0] / parts, local = part / size;
      std::vector<at::Tensor> pieces;
      for (int64_t j = 0; j < parts; ++j) pieces.push_back(v.narrow(0, j * part + rank * local, local));
      return parts == 1 ? pieces[0] : at::cat(pieces, 0);
    }
    case io::Split::kRow: return v.narrow(1, rank * shape[1] / size, shape[1] / size);
    case io::Split::kFusedColumn: break;
  }
  throw Error(ErrorKind::kInternal, name + ": a two-part fused tensor in a text_encoder/ checkpoint");
}

}  // namespace h3::text
