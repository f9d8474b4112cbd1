#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/error.h"

namespace h3::test {

// A fresh folder under the system temp dir, removed at scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    const auto base = std::filesystem::temp_directory_path();
    for (int i = 0;; ++i) {
      path_ = base / ("h3-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(i));
      if (std::filesystem::create_directory(path_)) break;
    }
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  std::string operator/(const std::string& s) const { return (path_ / s).string(); }

 private:
  std::filesystem::path path_;
};

// Runs f, expecting h3::Error of `kind` whose message contains every one of `parts`.
template <typename F>
void expect_error(F&& f, ErrorKind kind, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no h3::Error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& p : parts) EXPECT_THAT(e.what(), ::testing::HasSubstr(p));
  }
}

}  // namespace h3::test
