// A tensor a text_encoder/ config declares, read from its checkpoint after checking it is there
// with the declared shape: the language model's and the vision tower's loaders share this, each
// then taking its rank's part.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/types.h"

namespace h3::text {

// The whole tensor `name` of `ck` (a view of the mapping). Throws h3::Error: kNotFound naming the
// checkpoint and the tensor when it is missing (`part` names what the config describes: "the text
// encoder", "the vision tower"), kMismatch naming the file and both shapes.
at::Tensor checked_view(const io::Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape,
                        const std::string& part);

// This rank's part of `v` (the whole tensor `name`, of `shape`) among `size` ranks under `split`: a
// column split narrows dim 0, each of its `parts` equal parts alike (a fused q|k|v), a row split dim
// 1. Throws h3::Error(kInternal) for a two-part fused split, which neither loader declares.
at::Tensor rank_part(const at::Tensor& v, const std::string& name, const std::vector<int64_t>& shape,
                     io::Split split, int64_t parts, int rank, int size);

// `v` copied into storage of its own of `options` (a view of the mapping must not outlive it).
at::Tensor owned_copy(const at::Tensor& v, const at::TensorOptions& options);

}  // namespace h3::text
