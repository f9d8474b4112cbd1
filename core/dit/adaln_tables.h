// AdaLN tables: an evaluation's modulation depends only on its distinct timesteps (through the
// time MLP), not on its rows. For a request whose timesteps are known before the first step (both
// samplers' grids, the causal sampler's clean forward), every block's AdaLN rows are computed once
// here and the AdaLN projections — 13.0 of the release's 33.1 B parameters — can leave memory
// (docs/engine.md, "AdaLN tables").
//
// An entry holds what the projections would give for one evaluation's set of timesteps, computed
// by the very operations the forward runs (the same batch of M timesteps, the same kernels), so a
// forward that reads it is bit for bit one that computes on the fly. The rows are stored before
// any LoRA: an adapter on an AdaLN projection is added at use, as it is on the fly, so LoRAs can be
// attached and detached after the projections are gone. The time embedding the rows came from is
// kept with them: an evaluation whose embedding differs (a LoRA on the time MLP) cannot use them.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dit/config.h"
#include "dit/weights.h"

namespace h3::dit {

// One evaluation's distinct timesteps, ascending (t = 1 - sigma, fp32): what `at::_unique2` of its
// rows' timesteps gives.
using TimestepSet = std::vector<float>;
// {a, b} sorted, one element when equal.
TimestepSet timestep_set(float a, float b);
// "{0.0000, 0.5123}" for messages.
std::string describe(const TimestepSet& s);

class AdalnTables {
 public:
  struct Entry {
    at::Tensor timesteps;   // [M] fp32
    at::Tensor silu_temb;   // [M, time_embed_dim] fp32: SiLU of the time embedding the rows came from
    at::Tensor block_rows;  // [M, blocks, 18H / tp]: this rank's rows, the projections' dtype, no LoRA
    at::Tensor final_rows;  // [M, 2H]: the final layer's, the projection's dtype, no LoRA
  };

  AdalnTables() = default;
  // Computes an entry for every distinct set with `w`'s AdaLN projections (which must be resident).
  // Local to this rank: no collective (the forward gathers the rows as it does on the fly).
  static AdalnTables compute(const DitWeights& w, const DitConfig& c, const std::vector<TimestepSet>& sets);

  // The entry for an evaluation's distinct timesteps `uniq` [M] (compared bit for bit); null when
  // none was computed for them.
  const Entry* find(const at::Tensor& uniq) const;
  bool covers(const std::vector<TimestepSet>& sets) const;
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  // Bytes of the rows (block and final); the kept embeddings included.
  int64_t bytes() const;
  // The sets held (in key order), and the first `at_most` of them for messages.
  std::vector<TimestepSet> sets() const;
  std::string describe_sets(size_t at_most = 4) const;

 private:
  // Keyed by the timesteps' bit patterns: -0 and +0 or two NaNs must not meet.
  using Key = std::vector<uint32_t>;
  static Key key_of(const float* t, size_t n);
  std::map<Key, Entry> entries_;
};

// Bytes the tables of `sets` take on one of `tp` ranks for config `c`, the rows in a dtype of
// `row_bytes` bytes (2 for the release's bf16 projections): computed, nothing allocated.
int64_t adaln_table_bytes(const DitConfig& c, const std::vector<TimestepSet>& sets, int tp, int row_bytes);

}  // namespace h3::dit
