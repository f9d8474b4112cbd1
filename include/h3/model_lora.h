// GenerationRequest::lora's value that runs the model bare: no adapter at all, not even the
// chunk-causal adapter a model folder may ship (MODEL/causal-lora/: the embedded default does),
// which an endless causal request without a lora otherwise runs with (docs/causal.md, "The
// default's causal adapter"). A file of that name is given as ./none.
#pragma once

namespace h3 {

inline constexpr const char* kNoLora = "none";

}  // namespace h3
