// Helpers shared by the core/dist tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dist/world.h"

namespace h3::dist::testing {

// Runs fn on `size` thread ranks and fails the test (naming the rank) for
// every rank that threw: the checks inside fn use EXPECT_*, which are
// thread-safe in GoogleTest on POSIX.
inline void run_ok(int size, const std::function<void(Group&)>& fn, const WorldOptions& opts = {}) {
  auto results = run_threads(size, fn, opts);
  ASSERT_EQ(results.size(), static_cast<size_t>(size));
  for (const auto& r : results) EXPECT_TRUE(r.ok) << "rank " << r.rank << ": " << r.error;
}

}  // namespace h3::dist::testing
