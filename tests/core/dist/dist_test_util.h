// Helpers shared by the core/dist tests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "dist/world.h"

namespace h3::dist::testing {

// The thread ranks' transports: the tests of collectives, timeouts and owner waits hold on both.
inline auto thread_transports() {
  return ::testing::Values(ThreadTransport::kSharedMemory, ThreadTransport::kGloo);
}
inline std::string transport_label(ThreadTransport t) {
  return t == ThreadTransport::kSharedMemory ? "memory" : "gloo";
}
inline std::string transport_name(const ::testing::TestParamInfo<ThreadTransport>& info) {
  return transport_label(info.param);
}

// Runs fn on `size` thread ranks and fails the test (naming the rank) for
// every rank that threw: the checks inside fn use EXPECT_*, which are
// thread-safe in GoogleTest on POSIX.
inline void run_ok(int size, const std::function<void(Group&)>& fn, const WorldOptions& opts = {}) {
  auto results = run_threads(size, fn, opts);
  ASSERT_EQ(results.size(), static_cast<size_t>(size));
  for (const auto& r : results) EXPECT_TRUE(r.ok) << "rank " << r.rank << ": " << r.error;
}

// Orders events between ranks without clocks: a rank arrives once something
// happened (it gave up on a collective, say); another waits until n have. The
// bound only keeps a broken test from hanging: wait_for says whether n came.
class Latch {
 public:
  void arrive() {
    {
      std::lock_guard<std::mutex> lk(m_);
      ++count_;
    }
    cv_.notify_all();
  }
  bool wait_for(int n, std::chrono::seconds bound = std::chrono::seconds(60)) {
    std::unique_lock<std::mutex> lk(m_);
    return cv_.wait_for(lk, bound, [&] { return count_ >= n; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int count_ = 0;
};

}  // namespace h3::dist::testing
