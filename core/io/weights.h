// A checkpoint seen in canonical (diffusers) names, whatever layout it was
// stored in. Each canonical tensor is described as a list of row segments of
// stored tensors (a plain tensor is one segment; a de-interleaved q/k/v part is
// one segment per head; a swapped gated FFN is two), so that conversion and
// tensor-parallel sharding are one operation: pick the canonical rows (and, for
// a row split, the columns) this rank needs and copy only those bytes, block by
// block, into storage the result owns.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/types.h"

namespace h3::io {

class Weights {  // cheap to copy (shared state); safe to load from several threads at once
 public:
  // Detects the diffusers or native layout of `kind`; throws kFormat for a
  // native name without a known conversion, kMismatch when a q/k/v tensor
  // disagrees with params (heads x head_dim).
  static Weights open(const std::string& path, const LayoutParams& params);

  const std::string& path() const;
  bool is_native() const;
  std::vector<std::string> names() const;  // canonical names, sorted
  bool contains(const std::string& name) const;
  std::vector<int64_t> shape(const std::string& name) const;  // canonical full shape
  at::ScalarType dtype(const std::string& name) const;        // the stored dtype
  // The shape load() returns for this shard; throws like load() for a shard that does not fit.
  std::vector<int64_t> shard_shape(const std::string& name, const Shard& shard) const;
  const Checkpoint& checkpoint() const;

  // Materialises the tensor (or this shard of it) into contiguous storage of its own
  // (storage nbytes == numel * element size), reading the mapping slice by slice.
  // Throws kNotFound for an unknown name, kInvalidArgument for a shard that does
  // not fit the tensor (a rank out of range, a size that does not divide the split dim).
  at::Tensor load(const std::string& name, const Shard& shard = {}, const LoadOptions& opts = {}) const;

  struct State;

 private:
  std::shared_ptr<const State> s_;
};

}  // namespace h3::io
