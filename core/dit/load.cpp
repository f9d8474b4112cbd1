// Loading a transformer folder through core/io: canonical names whatever the stored layout,
// and under tensor parallelism only this rank's shards. What each tensor is — its split
// (docs/h3-model.md §10.4) and whether it stays fp32 — comes from its declaration
// (dit/parameters.h), never from its name.
#include <ATen/ATen.h>

#include "common/error.h"
#include "dit/parameters.h"
#include "dit/transformer.h"
#include "io/weights.h"

namespace h3::dit {
Transformer Transformer::load(const std::string& dir, dist::Group* group, const TransformerOptions& opts) {
  const auto config = DitConfig::load(dir);
  const TensorParallel tp(group);
  check_tp(config, tp.size());
  const auto weights =
      io::Weights::open(dir, io::LayoutParams{io::ModelKind::kDit, config.num_heads, config.head_dim});
  const at::ScalarType dtype = opts.dtype.value_or(opts.device.is_cuda() ? at::kBFloat16 : at::kFloat);
  auto get = [&](const ParamSpec& spec) {
    if (!weights.contains(spec.name)) {
      throw Error(ErrorKind::kNotFound,
                  weights.path() + ": tensor '" + spec.name +
                      "' is missing: the checkpoint does not hold the DiT its config.json "
                      "describes");
    }
    io::LoadOptions lo;
    lo.device = opts.device;
    // The release stores these in fp32 and the precision contract computes them in fp32.
    lo.dtype = spec.fp32 ? at::kFloat : dtype;
    return weights.load(spec.name, io::Shard{spec.split, tp.rank(), tp.size()}, lo);
  };
  return Transformer(config, DitWeights::bind(config, tp.size(), get), group);
}

}  // namespace h3::dit
