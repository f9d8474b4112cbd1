// Helpers shared by the core/io tests: the tests' temporary folder (tests/temp_dir.h), raw file writing for
// malformed inputs, and checks on where a tensor's storage lives.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "../../temp_dir.h"
#include "h3/error.h"

namespace h3::io::testing {

using TempDir = h3::test::TempDir;

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file with the given header text (length prefix computed) and data bytes.
inline void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  write_bytes(path, bytes + header + data);
}

inline std::string test_data(const std::string& rel) {
  const char* root = std::getenv("H3_TEST_DATA");
  if (!root) throw std::runtime_error("H3_TEST_DATA is not set (run through meson test)");
  return std::string(root) + "/" + rel;
}

// True when /proc/self/maps still lists a mapping of `path`.
inline bool is_mapped(const std::string& path) {
  char real[4096];
  std::string want = ::realpath(path.c_str(), real) ? std::string(real) : path;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.size() >= want.size() && line.compare(line.size() - want.size(), want.size(), want) == 0)
      return true;
  }
  return false;
}

// Resident kiB of this process's mappings of `path` (from /proc/self/smaps).
inline uint64_t mapped_rss_kib(const std::string& path) {
  char real[4096];
  std::string want = ::realpath(path.c_str(), real) ? std::string(real) : path;
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in = false;
  uint64_t kib = 0;
  while (std::getline(smaps, line)) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') < 20) {
      in = line.size() >= want.size() && line.compare(line.size() - want.size(), want.size(), want) == 0;
    } else if (in && line.compare(0, 4, "Rss:") == 0) {
      kib += std::strtoull(line.c_str() + 4, nullptr, 10);
    }
  }
  return kib;
}

// Runs `fn`, expecting an h3::Error of `kind` whose message holds every fragment.
template <typename Fn>
void expect_error(Fn&& fn, h3::ErrorKind kind, std::initializer_list<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const h3::Error& e) {
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << e.what();
    for (const auto& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "'" << f << "' not in: " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an h3::Error: " << e.what();
  }
}

}  // namespace h3::io::testing
