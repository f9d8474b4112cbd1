// How every error message writes a tensor shape: "[2, 3, 4]".
#pragma once

#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <string>

namespace h3 {

std::string shape_string(c10::IntArrayRef shape);

}  // namespace h3
