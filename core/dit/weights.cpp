#include "dit/weights.h"

#include <ATen/ATen.h>

#include "common/shape.h"
#include "dit/parameters.h"
#include "h3/error.h"

namespace h3::dit {

DitWeights DitWeights::bind(const DitConfig& c, int tp,
                            const std::function<at::Tensor(const ParamSpec&)>& get) {
  DitWeights w;
  w.refiner.resize(static_cast<size_t>(c.num_refiner_layers));
  w.blocks.resize(static_cast<size_t>(c.num_layers));
  declare_parameters(c, w, [&](const ParamSpec& spec, at::Tensor& slot) {
    slot = get(spec);
    const std::vector<int64_t> want = spec.local_shape(tp);
    if (!slot.defined() || slot.sizes() != at::IntArrayRef(want)) {
      throw Error(ErrorKind::kMismatch,
                  "tensor '" + spec.name + "' has shape " +
                      (slot.defined() ? shape_string(slot.sizes()) : std::string("(none)")) +
                      " but the config" + (tp > 1 ? " at tp " + std::to_string(tp) : "") + " needs " +
                      shape_string(want) + ": the checkpoint does not match its config.json");
    }
  });
  return w;
}

std::vector<std::pair<std::string, at::Tensor>> DitWeights::named() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  // Names only: the block counts come from this struct, the shapes of a blank config are unused.
  declare_parameters(DitConfig{}, *this, [&](const ParamSpec& spec, const at::Tensor& t) {
    if (t.defined()) out.emplace_back(spec.name, t);
  });
  return out;
}

}  // namespace h3::dit
