// Safetensors reader and writer: round trips, views over the mapping, and every
// malformed header as its own clear error.
#include "io/safetensors.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "io_test_util.h"

namespace h3::io {
namespace {

using testing::expect_error;
using testing::TempDir;
using testing::write_raw;

at::Tensor sample(at::ScalarType t, std::vector<int64_t> shape) {
  auto v = at::arange(0, c10::multiply_integers(shape), at::kDouble).reshape(shape);
  if (t == at::kBool) return at::fmod(v, 3).eq(1);
  if (at::isFloatingType(t)) return (v * 0.37 - 5).to(t);
  if (t == at::kByte) return at::fmod(v, 256).to(t);
  return (at::fmod(v, 200) - 100).to(t);
}

TEST(Safetensors, RoundTripsEveryDtypeZeroDimEmptyAndMetadata) {
  TempDir dir;
  const std::vector<at::ScalarType> dtypes = {at::kDouble, at::kFloat, at::kHalf, at::kBFloat16, at::kLong,
                                              at::kInt,    at::kShort, at::kChar, at::kByte,     at::kBool};
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (auto t : dtypes) {
    const std::string n = dtype_to_string(t);
    tensors.push_back({"m." + n, sample(t, {3, 5})});
    tensors.push_back({"scalar." + n, sample(t, {1}).reshape({})});
    tensors.push_back({"empty." + n, sample(t, {0, 4})});
  }
  // A non-contiguous input is written as its logical contents.
  tensors.push_back({"transposed", sample(at::kFloat, {4, 6}).t()});
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "round \"trip\" ✓"}};
  const std::string path = dir / "rt.safetensors";
  write_safetensors(path, tensors, meta);

  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->path(), path);
  EXPECT_EQ(f->metadata(), meta);
  ASSERT_EQ(f->tensors().size(), tensors.size());
  for (size_t i = 1; i < f->tensors().size(); ++i)
    EXPECT_LE(f->tensors()[i - 1].begin, f->tensors()[i].begin);
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    const TensorInfo& info = f->info(name);
    EXPECT_EQ(info.dtype, t.scalar_type());
    EXPECT_EQ(info.shape, t.sizes().vec());
    at::Tensor v = f->view(name);
    EXPECT_EQ(v.scalar_type(), t.scalar_type());
    EXPECT_EQ(v.sizes(), t.sizes());
    EXPECT_TRUE(at::equal(v, t.contiguous()));
    // Aligned for its element type: the writer pads the header to 8 bytes.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(f->tensor_data(info)) % v.element_size(), 0u);
  }
  EXPECT_EQ(f->view("scalar.F32").dim(), 0);
  EXPECT_EQ(f->view("empty.I8").numel(), 0);
  EXPECT_EQ(f->find("absent"), nullptr);
  expect_error([&] { f->info("absent"); }, ErrorKind::kNotFound, {path, "'absent'"});
}

TEST(Safetensors, ViewIsZeroCopyAndKeepsTheMappingAlive) {
  TempDir dir;
  const std::string path = dir / "v.safetensors";
  at::Tensor t = sample(at::kFloat, {64, 32});
  write_safetensors(path, {{"w", t}});
  at::Tensor v;
  {
    auto f = SafetensorsFile::open(path);
    v = f->view("w");
    auto* p = static_cast<const uint8_t*>(v.data_ptr());
    EXPECT_GE(p, f->mapped_data());
    EXPECT_LT(p, f->mapped_data() + f->mapped_size());
  }
  EXPECT_TRUE(testing::is_mapped(path));  // the view holds it
  EXPECT_TRUE(at::equal(v, t));
  v.reset();
  EXPECT_FALSE(testing::is_mapped(path));
}

TEST(Safetensors, WriterRefusesBadInput) {
  TempDir dir;
  const std::string path = dir / "bad.safetensors";
  auto t = at::zeros({2});
  expect_error(
      [&] {
        write_safetensors(path, {{"a", t}, {"a", t}});
      },
      ErrorKind::kInvalidArgument, {"'a'", "twice"});
  expect_error(
      [&] {
        write_safetensors(path, {{"__metadata__", t}});
      },
      ErrorKind::kInvalidArgument, {"__metadata__"});
  expect_error(
      [&] {
        write_safetensors(path, {{"c", at::zeros({2}, at::kComplexFloat)}});
      },
      ErrorKind::kInvalidArgument, {"cannot be stored"});
  expect_error(
      [&] {
        write_safetensors(dir / "no/such/dir.safetensors", {{"a", t}});
      },
      ErrorKind::kNotFound, {"no/such/dir"});
}

TEST(Safetensors, MissingFileIsNotFound) {
  TempDir dir;
  expect_error([&] { SafetensorsFile::open(dir / "nope.safetensors"); }, ErrorKind::kNotFound,
               {"nope.safetensors"});
}

// One malformed file per case; each must give its own message naming the file (and tensor).
struct BadCase {
  const char* label;
  std::string bytes;  // whole file when raw, else the header text
  bool raw;
  std::string data;
  std::vector<std::string> fragments;
};

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

TEST(Safetensors, EveryMalformedHeaderIsADistinctClearError) {
  const std::string d16(16, '\x01');
  const std::vector<BadCase> cases = {
      {"empty", "", true, "", {"empty file"}},
      {"truncated", std::string("\x05\x00\x00", 3), true, "", {"truncated header", "3 bytes"}},
      {"past_end", le64(1000) + "{}", true, "", {"header length 1000 runs past the end of the file"}},
      {"huge_len", le64(~0ull) + "{}", true, "", {"runs past the end"}},
      {"invalid_json", "{\"a\": ", false, "", {"invalid JSON header"}},
      {"trailing_garbage", "{} x", false, "", {"invalid JSON header"}},
      {"not_object", "[1, 2]", false, "", {"header is a JSON array, not an object"}},
      {"entry_not_object", R"({"w": 3})", false, "", {"'w'", "entry is not a JSON object"}},
      {"missing_dtype",
       R"({"w": {"shape": [4], "data_offsets": [0, 16]}})",
       false,
       d16,
       {"'w'", "\"dtype\""}},
      {"unknown_dtype",
       R"({"w": {"dtype": "F8", "shape": [4], "data_offsets": [0, 4]}})",
       false,
       d16,
       {"'w'", "unknown dtype 'F8'"}},
      {"negative_shape",
       R"({"w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})",
       false,
       d16,
       {"'w'", "negative dimension -4"}},
      {"float_shape",
       R"({"w": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 16]}})",
       false,
       d16,
       {"'w'", "dimension 2.5", "not a non-negative integer"}},
      {"string_shape",
       R"({"w": {"dtype": "F32", "shape": ["4"], "data_offsets": [0, 16]}})",
       false,
       d16,
       {"'w'", "not a non-negative integer"}},
      {"shape_not_array",
       R"({"w": {"dtype": "F32", "shape": 4, "data_offsets": [0, 16]}})",
       false,
       d16,
       {"'w'", "\"shape\"", "not an array"}},
      {"overflow_shape",
       R"({"w": {"dtype": "F32", "shape": [9223372036854775807, 4], "data_offsets": [0, 16]}})",
       false,
       d16,
       {"'w'", "overflows"}},
      {"span_shape",
       R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})",
       false,
       d16,
       {"'w'", "byte span 16 disagrees with shape [3] x F32 = 12 bytes"}},
      {"out_of_range",
       R"({"w": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}})",
       false,
       d16,
       {"'w'", "out of range", "16 bytes"}},
      {"bad_offsets",
       R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0]}})",
       false,
       d16,
       {"'w'", "\"data_offsets\"", "pair"}},
      {"negative_offsets",
       R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [-1, 15]}})",
       false,
       d16,
       {"'w'", "not non-negative integers"}},
      {"unsorted",
       R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})",
       false,
       d16,
       {"'w'", "unsorted (end before begin)"}},
      {"overlap",
       R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
           "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
       false,
       d16,
       {"'b'", "overlap tensor 'a'"}},
      {"twice",
       R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
           "a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
       false,
       d16,
       {"'a'", "present twice in the header"}},
      {"metadata_not_object",
       R"({"__metadata__": [1]})",
       false,
       "",
       {"\"__metadata__\" is not a JSON object"}},
      {"metadata_not_string", R"({"__metadata__": {"k": 1}})", false, "", {"'k' is not a string"}},
  };
  TempDir dir;
  std::set<std::string> messages;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string path = dir / (std::string(c.label) + ".safetensors");
    if (c.raw)
      testing::write_bytes(path, c.bytes);
    else
      write_raw(path, c.bytes, c.data);
    std::vector<std::string> frags = c.fragments;
    frags.push_back(path);
    try {
      SafetensorsFile::open(path);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(ErrorKind::kFormat));
      for (const auto& f : frags) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
      // Distinct: the same problem never reads like another one (paths differ, so strip them).
      std::string m = e.what();
      m.erase(0, path.size());
      messages.insert(m);
    }
    // The parser alone (the fuzzed entry point) agrees.
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_THROW(parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path),
                 Error);
  }
  EXPECT_EQ(messages.size(), cases.size());
}

TEST(Safetensors, AcceptsEmptyTensorsAnywhereAndMetadataOnly) {
  TempDir dir;
  const std::string path = dir / "ok.safetensors";
  write_raw(path,
            R"({"__metadata__": {"k": "v"}, "e": {"dtype": "BF16", "shape": [0, 3], "data_offsets": [4, 4]},
                "a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}})",
            std::string(4, '\0'));
  auto f = SafetensorsFile::open(path);
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->view("a").dim(), 0);
  EXPECT_EQ(f->view("e").numel(), 0);
  EXPECT_EQ(f->metadata().at("k"), "v");
}

}  // namespace
}  // namespace h3::io
