#include "dit/parameters.h"

#include "dit/weights.h"

namespace h3::dit {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<int64_t> ParamSpec::local_shape(int tp) const {
  std::vector<int64_t> s = shape;
  switch (split) {
    case io::Split::kColumn:
    case io::Split::kFusedColumn: s[0] /= tp; break;
    case io::Split::kRow: s[1] /= tp; break;
    case io::Split::kReplicated: break;
  }
  return s;
}

std::vector<ParamSpec> dit_parameters(const DitConfig& c) {
  DitWeights shapes_only;  // no tensors: the declaration's slots are left alone
  shapes_only.refiner.resize(static_cast<size_t>(c.num_refiner_layers));
  shapes_only.blocks.resize(static_cast<size_t>(c.num_layers));
  std::vector<ParamSpec> out;
  declare_parameters(c, shapes_only,
                     [&](ParamSpec spec, const at::Tensor&) { out.push_back(std::move(spec)); });
  return out;
}

ParamCount count_parameters(const std::vector<ParamSpec>& specs) {
  ParamCount n;
  for (const auto& s : specs) {
    const int64_t e = s.numel();
    n.total += e;
    if (s.adaln) n.adaln += e;
    n.release_bytes += e * (s.fp32 ? 4 : 2);
  }
  return n;
}

}  // namespace h3::dit
