#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "../../temp_dir.h"
#include "h3/error.h"

namespace h3::test {

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
