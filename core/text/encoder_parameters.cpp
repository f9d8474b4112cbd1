#include "text/encoder_parameters.h"

namespace h3::text {

int64_t EncoderParameter::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<EncoderParameter> encoder_parameters(const EncoderConfig& c, int64_t layers) {
  // Names and shapes only: a blank weights struct with the layer count.
  EncoderWeights blank;
  blank.layers.resize(static_cast<size_t>(layers));
  std::vector<EncoderParameter> out;
  declare_encoder_parameters(c, blank,
                             [&](const EncoderParameter& p, const at::Tensor&) { out.push_back(p); });
  return out;
}

EncoderParameter final_norm_parameter(const EncoderConfig& c) {
  return {"model.language_model.norm.weight", {c.hidden_size}};
}

}  // namespace h3::text
