#include "io/safetensors_header.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "common/shape.h"
#include "h3/error.h"
#include "io/json_strict.h"

namespace h3::io {
namespace {

struct DtypeName {
  const char* name;
  at::ScalarType type;
};
constexpr DtypeName kDtypes[] = {
    {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16},
    {"I64", at::kLong},   {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
    {"U8", at::kByte},    {"BOOL", at::kBool},
};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::kFormat, path + ": " + what + "; the file is not a valid safetensors file");
}
[[noreturn]] void fail_tensor(const std::string& path, const std::string& name, const std::string& what) {
  throw Error(ErrorKind::kFormat,
              path + ": tensor '" + name + "': " + what + "; the file is not a valid safetensors file");
}

// A JSON integer that fits in [0, INT64_MAX]; nullopt for anything else.
std::optional<uint64_t> as_index(const nlohmann::json& v, bool* negative) {
  *negative = false;
  if (v.is_number_unsigned()) {
    auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return u;
  }
  if (v.is_number_integer()) {
    auto i = v.get<int64_t>();
    if (i < 0) {
      *negative = true;
      return std::nullopt;
    }
    return static_cast<uint64_t>(i);
  }
  return std::nullopt;
}

std::string supported_list() {
  std::string out;
  for (const auto& d : kDtypes) out += (out.empty() ? "" : " ") + std::string(d.name);
  return out;
}

TensorInfo parse_entry(const std::string& path, const std::string& name, const nlohmann::json& e,
                       uint64_t data_size) {
  if (!e.is_object()) fail_tensor(path, name, "entry is not a JSON object");
  TensorInfo t;
  t.name = name;

  auto d = e.find("dtype");
  if (d == e.end() || !d->is_string()) fail_tensor(path, name, "missing or non-string \"dtype\"");
  auto dt = dtype_from_string(d->get<std::string>());
  if (!dt) {
    fail_tensor(path, name,
                "unknown dtype '" + d->get<std::string>() + "' (supported: " + supported_list() + ")");
  }
  t.dtype = *dt;

  auto s = e.find("shape");
  if (s == e.end() || !s->is_array()) fail_tensor(path, name, "missing \"shape\" or it is not an array");
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto& dim : *s) {
    bool negative = false;
    auto v = as_index(dim, &negative);
    if (negative) fail_tensor(path, name, "negative dimension " + dim.dump() + " in \"shape\"");
    if (!v)
      fail_tensor(path, name, "dimension " + dim.dump() + " in \"shape\" is not a non-negative integer");
    t.shape.push_back(static_cast<int64_t>(*v));
    overflow = overflow || __builtin_mul_overflow(numel, *v, &numel);
  }
  uint64_t need = 0;
  overflow =
      overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(c10::elementSize(t.dtype)), &need);
  if (overflow) fail_tensor(path, name, "shape " + shape_string(t.shape) + " overflows 64-bit byte counts");

  auto o = e.find("data_offsets");
  if (o == e.end() || !o->is_array() || o->size() != 2) {
    fail_tensor(path, name, "missing \"data_offsets\" or it is not a pair [begin, end]");
  }
  bool negative = false;
  auto b = as_index((*o)[0], &negative);
  auto en = as_index((*o)[1], &negative);
  if (!b || !en) fail_tensor(path, name, "\"data_offsets\" " + o->dump() + " are not non-negative integers");
  t.begin = *b;
  t.end = *en;
  if (t.end < t.begin) {
    fail_tensor(path, name, "\"data_offsets\" " + o->dump() + " are unsorted (end before begin)");
  }
  if (t.end > data_size) {
    fail_tensor(path, name,
                "\"data_offsets\" " + o->dump() + " are out of range: the data area holds " +
                    std::to_string(data_size) + " bytes");
  }
  if (t.end - t.begin != need) {
    fail_tensor(path, name,
                "byte span " + std::to_string(t.end - t.begin) + " disagrees with shape " +
                    shape_string(t.shape) + " x " + dtype_to_string(t.dtype) + " = " + std::to_string(need) +
                    " bytes");
  }
  return t;
}

}  // namespace

std::optional<at::ScalarType> dtype_from_string(const std::string& s) {
  for (const auto& d : kDtypes) {
    if (s == d.name) return d.type;
  }
  return std::nullopt;
}

const char* dtype_to_string(at::ScalarType t) {
  for (const auto& d : kDtypes) {
    if (t == d.type) return d.name;
  }
  throw Error(ErrorKind::kInvalidArgument,
              std::string("dtype ") + c10::toString(t) +
                  " cannot be stored in safetensors (supported: " + supported_list() + ")");
}

ParsedHeader parse_safetensors_header(const uint8_t* bytes, uint64_t size, const std::string& path) {
  if (size == 0) fail(path, "empty file (0 bytes)");
  if (size < 8)
    fail(path, "truncated header: " + std::to_string(size) + " bytes, fewer than the 8-byte length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];  // little-endian
  if (n > size - 8) {
    fail(path, "header length " + std::to_string(n) + " runs past the end of the file (" +
                   std::to_string(size) + " bytes)");
  }
  if (n > kMaxHeaderBytes) {
    fail(path,
         "header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxHeaderBytes));
  }

  const char* text = reinterpret_cast<const char*>(bytes + 8);
  StrictJson js = parse_json_strict(text, text + n);
  if (!js.parse_error.empty()) fail(path, "invalid JSON header (" + js.parse_error + ")");
  if (!js.value.is_object())
    fail(path, std::string("header is a JSON ") + js.value.type_name() + ", not an object");
  if (js.duplicate_key) {
    fail_tensor(path, *js.duplicate_key, "present twice in the header");
  }

  ParsedHeader out;
  out.data_offset = 8 + n;
  out.data_size = size - out.data_offset;
  for (const auto& [key, value] : js.value.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail(path, "\"__metadata__\" is not a JSON object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) fail(path, "\"__metadata__\" value for '" + mk + "' is not a string");
        out.metadata.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    out.tensors.push_back(parse_entry(path, key, value, out.data_size));
  }

  std::sort(out.tensors.begin(), out.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Non-empty spans must not overlap. Empty tensors occupy no bytes and may sit anywhere in range.
  const TensorInfo* prev = nullptr;
  for (const auto& t : out.tensors) {
    if (t.begin == t.end) continue;
    if (prev && t.begin < prev->end) {
      fail_tensor(path, t.name,
                  "bytes [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ") overlap tensor '" +
                      prev->name + "' [" + std::to_string(prev->begin) + ", " + std::to_string(prev->end) +
                      ")");
    }
    prev = &t;
  }
  return out;
}

}  // namespace h3::io
