// This rank's place in the DiT's parallel layout: tensor parallelism (TP, the weights split
// across ranks, docs/h3-model.md §10.4) beside Ulysses sequence parallelism (SP: the rows split
// across ranks, attention all-to-all by heads; docs/engine.md, "Sequence parallelism"), the
// world's ranks forming a tp × sp grid. World rank w is TP rank w % tp of SP rank w / tp: the
// ranks of one TP group are neighbours, those of one SP group tp apart. Every collective runs
// on the world group; a TP or SP group's exchange is an all_to_all whose parts for the other
// ranks are empty. A null group means one rank holding every weight and every row.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace h3::dist {
class Group;
}

namespace h3::dit {

// Rows [begin, begin + count) of a sequence that one SP rank holds.
struct RowRange {
  int64_t begin = 0, count = 0;
};

class TensorParallel {
 public:
  // `sp` must divide the group's size (Transformer checks it against the model first).
  explicit TensorParallel(dist::Group* group = nullptr, int sp = 1);
  // The TP rank and size: what the weights' shards follow.
  int rank() const { return rank_; }
  int size() const { return size_; }
  // The SP rank and size.
  int sp_rank() const { return sp_rank_; }
  int sp_size() const { return sp_size_; }
  dist::Group* group() const { return group_; }

  // Sums the row-parallel partial outputs of this rank's TP group, in place.
  void all_reduce_sum(at::Tensor& t) const;
  // Concatenates the column-parallel outputs of this rank's TP group along the last dimension,
  // in TP rank order.
  at::Tensor gather_last_dim(const at::Tensor& t) const;

  // The rows of a sequence of `rows` that SP rank `sp_rank` holds: an even split, the first
  // rows % sp ranks one row more. No padding: the all-to-all moves parts of any length.
  RowRange rows_of(int64_t rows, int sp_rank) const;
  RowRange own_rows(int64_t rows) const { return rows_of(rows, sp_rank_); }
  // Every SP rank's rows [n_s, ...] back together, in SP order ([rows, ...] on every rank).
  at::Tensor gather_rows(const at::Tensor& own) const;
  // Ulysses' first all-to-all: this rank's rows of q, k, v stacked [n, 3, heads, D] (its TP
  // heads) -> every row for the heads of its SP rank, [rows, 3, heads / sp, D].
  at::Tensor rows_to_heads(const at::Tensor& qkv) const;
  // The second: attention's output for every row and this SP rank's heads [rows, heads / sp * D]
  // -> this rank's rows for all its TP heads [n, heads * D], heads in their TP order.
  at::Tensor heads_to_rows(const at::Tensor& o, int64_t rows) const;

 private:
  int world_rank(int tp_rank, int sp_rank) const { return sp_rank * size_ + tp_rank; }
  enum class Peers { kTp, kSp };  // this rank's TP group, or its SP group
  // One all_to_all within this rank's `peers`: `part(k)` goes to the k-th peer (in TP or SP order,
  // this rank included), an empty part to every other rank; returns what each peer sent, in order.
  std::vector<at::Tensor> exchange(Peers peers, const std::function<at::Tensor(int)>& part) const;

  dist::Group* group_ = nullptr;
  int rank_ = 0, size_ = 1;        // TP
  int sp_rank_ = 0, sp_size_ = 1;  // SP
};

}  // namespace h3::dit
