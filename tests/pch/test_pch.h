// The test executables of several files: ATen, nlohmann_json, GoogleTest and GoogleMock parsed
// once per executable (cpp_pch), not once per file. Third-party headers only (see
// core/pch/torch_pch.h). No include guard: a precompiled header is compiled as a main file.

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>
