// What almost every translation unit of the engine parses first: LibTorch's ATen (about 8 of a
// median 15 s per file at -O3 on this project's 2-core machines) and nlohmann_json. Meson
// precompiles it once per target (cpp_pch) and puts it in front of each of that target's files,
// so it must stay a pure list of heavy, stable third-party headers: one of the project's own
// would make every file of the target depend on it. No include guard: it is compiled as a main
// file. docs/building.md, "Precompiled headers".

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>
