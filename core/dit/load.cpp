// Loading a transformer folder through core/io: canonical names whatever the stored layout,
// and under tensor parallelism only this rank's shards. What each tensor is — its split
// (docs/h3-model.md §10.4) and whether it stays fp32 — comes from its declaration
// (dit/parameters.h), never from its name.
#include <ATen/ATen.h>

#include <utility>
#include <vector>

#include "common/shape.h"
#include "dist/group.h"
#include "dit/parameters.h"
#include "dit/transformer.h"
#include "h3/error.h"
#include "io/weights.h"

namespace h3::dit {
namespace {

// Reads one declared tensor: this rank's shard, in its precision-contract dtype.
class ShardReader {
 public:
  ShardReader(const std::string& dir, const DitConfig& c, const TensorParallel& tp,
              const TransformerOptions& opts)
      : weights_(io::Weights::open(dir, io::LayoutParams{io::ModelKind::kDit, c.num_heads, c.head_dim})),
        tp_(tp),
        device_(opts.device),
        dtype_(opts.dtype.value_or(opts.device.is_cuda() ? at::kBFloat16 : at::kFloat)) {}

  at::Tensor operator()(const ParamSpec& spec) const {
    if (!weights_.contains(spec.name)) {
      throw Error(ErrorKind::kNotFound,
                  weights_.path() + ": tensor '" + spec.name +
                      "' is missing: the checkpoint does not hold the DiT its config.json "
                      "describes");
    }
    io::LoadOptions lo;
    lo.device = device_;
    // The release stores these in fp32 and the precision contract computes them in fp32.
    lo.dtype = spec.fp32 ? at::kFloat : dtype_;
    return weights_.load(spec.name, io::Shard{spec.split, tp_.rank(), tp_.size()}, lo);
  }

 private:
  io::Weights weights_;
  TensorParallel tp_;
  c10::Device device_;
  at::ScalarType dtype_;
};

}  // namespace

Transformer Transformer::load(const std::string& dir, dist::Group* group, const TransformerOptions& opts) {
  const auto config = DitConfig::load(dir);
  check_layout(config, group ? group->size() : 1, opts.sp);
  const TensorParallel tp(group, opts.sp);
  const ShardReader read(dir, config, tp, opts);
  Transformer t(config, DitWeights::bind(config, tp.size(), read), group, opts.sp);
  t.dir_ = dir;
  t.options_ = opts;
  return t;
}

void Transformer::reload_adaln_projections() {
  if (dir_.empty()) {
    throw Error(ErrorKind::kInvalidArgument,
                "AdaLN tables: the projections were dropped and this transformer was not loaded from a "
                "folder, so tables for other timesteps cannot be computed");
  }
  const ShardReader read(dir_, config_, tp_, options_);
  // Read all of them before binding any: a failure leaves the weights as they were.
  std::vector<std::pair<at::Tensor*, at::Tensor>> loaded;
  declare_parameters(config_, weights_, [&](const ParamSpec& spec, at::Tensor& slot) {
    if (!spec.adaln) return;
    auto t = read(spec);
    const auto want = spec.local_shape(tp_.size());
    if (t.sizes() != at::IntArrayRef(want)) {
      throw Error(ErrorKind::kMismatch, dir_ + ": tensor '" + spec.name + "' has shape " +
                                            shape_string(t.sizes()) + " on reading it again, not " +
                                            shape_string(want));
    }
    loaded.emplace_back(&slot, std::move(t));
  });
  for (auto& [slot, t] : loaded) *slot = std::move(t);
}

}  // namespace h3::dit
