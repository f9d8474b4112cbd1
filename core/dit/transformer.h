// The H3 DiT: one rank's part of the tensor-parallel transformer and its forward pass
// (docs/h3-model.md §4.4). Every rank of the group calls forward() with the same inputs; each gets
// the full velocities (row-parallel outputs are all-reduced, the AdaLN table gathered).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

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
};

class Transformer {
 public:
  // Binds already-loaded weights (this rank's shards for `group`'s rank and size).
  Transformer(DitConfig config, DitWeights weights, dist::Group* group = nullptr);

  // Loads a transformer folder as the release has it (config.json + safetensors, one file or an
  // index; diffusers or native layout). With a group of size tp > 1 this rank reads only its shards.
  static Transformer load(const std::string& dir, dist::Group* group = nullptr,
                          const TransformerOptions& opts = {});

  const DitConfig& config() const { return config_; }
  const DitWeights& weights() const { return weights_; }
  int rank() const { return tp_.rank(); }
  const TensorParallel& tp() const { return tp_; }
  int tp_size() const { return tp_.size(); }

  // Runs on `group` from now on: a process world formed again after a lost rank, in which this
  // rank has the same rank and the world the same size, so its shards still fit. Throws
  // h3::Error(kInternal) otherwise.
  void use_group(dist::Group* group);

  // Attaches a LoRA (dit/lora.h; this rank's shards), replacing any attached before, or
  // detaches it (an empty path). Throws as attach_lora does, leaving the adapters unchanged.
  LoraSummary attach_lora(const std::string& path);
  void detach_lora();

  // One denoiser evaluation; a collective over the group.
  Velocity forward(const DitInputs& in) const;
  Velocity forward(const PackedSequence& seq) const;

 private:
  DitConfig config_;
  DitWeights weights_;
  TensorParallel tp_;
};

// Throws h3::Error(kInvalidArgument) unless `tp` ranks can split this model: tp must divide the
// heads, the FFN width and the AdaLN width.
void check_tp(const DitConfig& c, int tp);

}  // namespace h3::dit
