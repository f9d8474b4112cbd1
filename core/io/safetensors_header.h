// Parsing and validation of a safetensors header, separate from file mapping so
// that it can be fuzzed on arbitrary bytes.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON, then the data
// area. Every check happens here, before any tensor byte is touched; a file that
// passes is safe to view: every span lies inside the data area, matches its
// shape and dtype, and no two spans overlap.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace h3::io {

struct TensorInfo {
  std::string name;
  at::ScalarType dtype;  // F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets inside the data area
};

struct ParsedHeader {
  std::vector<TensorInfo> tensors;  // sorted by begin offset
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // where the data area starts in the file (8 + header length)
  uint64_t data_size = 0;    // bytes in the data area
};

// Largest header accepted; the format's reference implementation uses the same bound.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Validates `size` bytes of a whole file; `path` only names the file in errors.
// Throws h3::Error(kFormat) with a distinct message for each problem.
ParsedHeader parse_safetensors_header(const uint8_t* bytes, uint64_t size, const std::string& path);

// "F32" <-> at::kFloat for the ten dtypes of the format.
std::optional<at::ScalarType> dtype_from_string(const std::string& s);
const char* dtype_to_string(at::ScalarType t);  // throws kInvalidArgument for others

}  // namespace h3::io
