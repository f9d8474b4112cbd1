#include "h3/progress.h"

namespace h3 {

const char* to_string(Phase p) {
  switch (p) {
    case Phase::kLoading: return "loading";
    case Phase::kConditioning: return "conditioning";
    case Phase::kDenoising: return "denoising";
    case Phase::kDecoding: return "decoding";
    case Phase::kDone: return "done";
    case Phase::kPrompt: return "prompt";
    case Phase::kSteps: return "steps";
  }
  return "unknown";
}

}  // namespace h3
