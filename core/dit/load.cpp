// Loading a transformer folder through core/io: canonical names whatever the stored layout,
// and under tensor parallelism only this rank's shards (docs/h3-model.md §10.4 via io::dit_split).
#include <ATen/ATen.h>

#include "common/error.h"
#include "dit/transformer.h"
#include "io/shard_plan.h"
#include "io/weights.h"

namespace h3::dit {
namespace {

// The release stores these in fp32 and the precision contract computes them in fp32.
bool stays_fp32(const std::string& name) {
  for (const char* p : {"proj_in.", "audio_proj_in.", "time_embedder.", "proj_out.", "audio_proj_out."}) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

}  // namespace

Transformer Transformer::load(const std::string& dir, dist::Group* group, const TransformerOptions& opts) {
  const auto config = DitConfig::load(dir);
  const TensorParallel tp(group);
  check_tp(config, tp.size());
  const auto weights =
      io::Weights::open(dir, io::LayoutParams{io::ModelKind::kDit, config.num_heads, config.head_dim});
  const at::ScalarType dtype = opts.dtype.value_or(opts.device.is_cuda() ? at::kBFloat16 : at::kFloat);
  auto get = [&](const std::string& name) {
    if (!weights.contains(name)) {
      throw Error(ErrorKind::kNotFound,
                  weights.path() + ": tensor '" + name +
                      "' is missing: the checkpoint does not hold the DiT its config.json "
                      "describes");
    }
    io::LoadOptions lo;
    lo.device = opts.device;
    lo.dtype = stays_fp32(name) ? at::kFloat : dtype;
    return weights.load(name, io::Shard{io::dit_split(name), tp.rank(), tp.size()}, lo);
  };
  return Transformer(config, DitWeights::bind(config, tp.size(), get), group);
}

}  // namespace h3::dit
