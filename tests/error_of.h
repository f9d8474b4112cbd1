// The refusal a test expects: what the h3::Error that f throws says, checked to be of the kind
// wanted; a test failure (and "") when f throws none.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "h3/error.h"

namespace h3::test {

inline std::string error_of(const std::function<void()>& f, ErrorKind want) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), want) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

}  // namespace h3::test
