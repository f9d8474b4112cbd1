// What the ranks of a process world must agree on before they are admitted (admission/door.h): the
// model's configs, the shard plan and the weights' dtypes and shapes, and the backend.
#pragma once

#include <string>

#include "engine/model/model.h"

namespace h3::engine_detail {

// A flat JSON object of strings: the SHA-256 of every *.json of the model folder and its
// subfolders (configs, tokenizer, shard indexes: the shard plan), of each subfolder's
// safetensors headers (every tensor's dtype and shape, and the file it lives in), the world
// size (the tensor-parallel split), the backend, the compute dtype (resolved: "fp32" or
// "bf16"; ranks computing in different precisions would sum mismatched partial products) and
// the engine's version, and the DiT's sequence-parallel degree (its tp x sp layout). Two ranks whose objects
// differ are refused at the door, which names the fields.
std::string world_settings(const ModelInfo& m, int world_size, const std::string& device,
                           const std::string& compute_dtype, int sp = 1);

}  // namespace h3::engine_detail
