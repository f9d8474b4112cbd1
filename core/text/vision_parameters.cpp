#include "text/vision_parameters.h"

namespace h3::text {

int64_t VisionParameter::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<VisionParameter> vision_parameters(const VisionConfig& c) {
  VisionWeights w;
  w.blocks.resize(static_cast<size_t>(c.depth));
  w.deepstack.resize(c.deepstack_visual_indexes.size());
  std::vector<VisionParameter> out;
  declare_vision_parameters(c, w, [&](const VisionParameter& p, const at::Tensor&) { out.push_back(p); });
  return out;
}

}  // namespace h3::text
