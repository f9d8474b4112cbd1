// `h3 inspect DIR|FILE`: what a model folder, a component folder or a checkpoint holds (configs,
// tensor count, dtypes, bytes) and, for a DiT, how a tensor-parallel plan of `tp` ranks splits it.
#pragma once

#include <cstdio>
#include <string>

namespace h3::tools {

// Prints the report to `out`; returns the exit code. Throws h3::Error for unreadable input.
int inspect_path(const std::string& path, int tp, std::FILE* out);

}  // namespace h3::tools
