// The model hash a stream's marking names (docs/element.md, "Marking"): SHA-256 over the model
// folder's weights, defined so that coreutils can recompute it:
//   cd MODEL && find . -name '*.safetensors' -printf '%P\n' | LC_ALL=C sort |
//     xargs -d '\n' sha256sum | sha256sum
// i.e. the SHA-256 of the `sha256sum` lines ("HEX  RELATIVE/PATH\n") of every .safetensors file
// under the folder, in the byte order of their relative paths. Configs and the tokenizer are not
// hashed: the weights are what makes one model's frames differ from another's of the same
// architecture. A single .safetensors file (a LoRA) hashes as the folder holding only it.
// Torch-free: the plugin and `h3 replay` both use it.
#pragma once

#include <string>

namespace h3::marking {

// Lower-case hex. Reads every weight file once per process: the result is kept, keyed by the
// folder and every file's size and modification time, so a second stream on the same model costs
// a directory walk. Throws h3::Error(kNotFound) naming `path` when it is missing or holds no
// .safetensors file, kFormat naming the file it could not read.
std::string model_sha256(const std::string& path);

// The SHA-256 of a byte string, lower-case hex (the lines above are hashed with it).
std::string sha256_hex(const std::string& bytes);

}  // namespace h3::marking
