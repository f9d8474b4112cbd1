// The H3 DiT: one rank's part of the tensor-parallel transformer and its forward pass
// (docs/h3-model.md §4.4). Every rank of the group calls forward() with the same inputs; each gets
// the full velocities (row-parallel outputs are all-reduced, the AdaLN table gathered).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

#include "dit/adaln_tables.h"
#include "dit/config.h"
#include "dit/lora.h"
#include "dit/packed_sequence.h"
#include "dit/tp.h"
#include "dit/weights.h"

namespace h3::dit {

struct Velocity {
  at::Tensor video;  // [1, in_channels, T, h, w] fp32
  at::Tensor audio;  // [2A, audio_in_channels] fp32
};

struct TransformerOptions {
  c10::Device device = c10::Device(c10::kCPU);
  // Precision of the residual stream and the block weights. Unset: fp32 on CPU; on CUDA the
  // release contract, bf16 (norms, modulation, time MLP, patch projections and heads stay fp32).
  std::optional<at::ScalarType> dtype;
  // Ulysses sequence parallelism: the group's ranks form tp x sp (dit/tp.h); sp must divide the
  // group's size and the heads each TP rank holds. 1: tensor parallelism over every rank.
  int sp = 1;
};

class Transformer {
 public:
  // Binds already-loaded weights (this rank's shards for its TP rank and size in a tp x sp
  // layout of `group`).
  Transformer(DitConfig config, DitWeights weights, dist::Group* group = nullptr, int sp = 1);

  // Loads a transformer folder as the release has it (config.json + safetensors, one file or an
  // index; diffusers or native layout). With a group of size tp > 1 this rank reads only its shards.
  static Transformer load(const std::string& dir, dist::Group* group = nullptr,
                          const TransformerOptions& opts = {});

  const DitConfig& config() const { return config_; }
  const DitWeights& weights() const { return weights_; }
  int rank() const { return tp_.rank(); }
  const TensorParallel& tp() const { return tp_; }
  int tp_size() const { return tp_.size(); }
  int sp_size() const { return tp_.sp_size(); }

  // Runs on `group` from now on: a process world formed again after a lost rank, in which this
  // rank has the same rank and the world the same size, so its shards still fit. Throws
  // h3::Error(kInternal) otherwise.
  void use_group(dist::Group* group);

  // Attaches a LoRA (dit/lora.h; this rank's shards), replacing any attached before, or
  // detaches it (an empty path). Throws as attach_lora does, leaving the adapters unchanged.
  // With AdaLN tables in use, a change of the time MLP's adapters computes them again (reading
  // the projections again when they were dropped).
  LoraSummary attach_lora(const std::string& path);
  void detach_lora();

  // AdaLN tables (dit/adaln_tables.h): computes the AdaLN rows of every evaluation in `sets` on
  // this rank (no collective) and reads them from now on, in place of any earlier tables; with
  // `drop_projections` the AdaLN projections then leave memory. When they already have and the
  // sets are new, this rank's shards of them are read again from the folder the transformer was
  // loaded from, the tables computed and the projections dropped again. Throws
  // h3::Error(kInvalidArgument) when they are gone and there is no folder to read them from.
  void use_adaln_tables(const std::vector<TimestepSet>& sets, bool drop_projections);
  // Null when no tables are in use.
  const AdalnTables* adaln_tables() const { return tables_.empty() ? nullptr : &tables_; }
  bool adaln_resident() const { return weights_.norm_out_linear.weight.defined(); }
  // Bytes this rank holds for the DiT: its weights, the adapters and the AdaLN tables.
  int64_t resident_bytes() const;

  // One denoiser evaluation; a collective over the group.
  Velocity forward(const DitInputs& in) const;
  Velocity forward(const PackedSequence& seq) const;

 private:
  // Reads this rank's shards of the AdaLN projections again from dir_.
  void reload_adaln_projections();
  bool time_mlp_adapted() const;
  // Computes the tables in use again (after the time MLP's adapters changed).
  void refresh_adaln_tables();

  DitConfig config_;
  DitWeights weights_;
  TensorParallel tp_;
  AdalnTables tables_;
  // Where load() read the weights from, to read the AdaLN projections again; empty otherwise.
  std::string dir_;
  TransformerOptions options_;
};

// Throws h3::Error(kInvalidArgument) unless `tp` ranks can split this model: tp must divide the
// heads, the FFN width and the AdaLN width.
void check_tp(const DitConfig& c, int tp);
// The TP size of `ranks` ranks with Ulysses degree `sp` (ranks / sp). Throws
// h3::Error(kInvalidArgument), naming the values, unless the model can run so: sp dividing the
// ranks, check_tp(tp), and sp dividing each TP rank's heads.
int check_layout(const DitConfig& c, int ranks, int sp);

}  // namespace h3::dit
