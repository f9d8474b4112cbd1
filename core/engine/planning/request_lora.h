// Which LoRA a request runs with (docs/causal.md, "LoRA"): the one it names; else, for an endless
// stream with the causal sampler, the model's own chunk-causal adapter where its folder ships one
// (causal-lora/ holding adapter_model.safetensors: the embedded default's, trained by train/tiny);
// none for lora = kNoLora (h3/model_lora.h), for a clip that names none, or where neither exists.
#pragma once

#include <string>

#include "engine/model/model.h"
#include "h3/model_lora.h"
#include "h3/request.h"

namespace h3 {

// MODEL/causal-lora when it holds adapter_model.safetensors, else "".
std::string model_causal_lora(const std::string& model_dir);

// The adapter file or folder `req` runs with on `m`; "" for none.
std::string request_lora(const ModelInfo& m, const GenerationRequest& req);

}  // namespace h3
