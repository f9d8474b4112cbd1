// The memory the requests in flight hold beside the shared weights (engine/scheduler/stream_budget.h):
// admitted up to what fits, refused beyond it with the numbers, the others untouched.
#include "engine/scheduler/stream_budget.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "h3/error.h"

namespace h3 {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

std::string refusal_of(StreamBudget& b, int64_t bytes) {
  try {
    b.admit(bytes, "64x64, endless");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfMemory);
    return e.what();
  }
  return "";
}

TEST(StreamBudget, AMaxMemoryThatHoldsTwoStreamsAdmitsTwoAndRefusesTheThirdWithTheNumbers) {
  StreamBudget b(250 * kMiB, [] { return int64_t(0); });
  StreamBudget::Reservation one = b.admit(100 * kMiB, "64x64, endless");
  StreamBudget::Reservation two = b.admit(100 * kMiB, "64x64, endless");
  EXPECT_EQ(b.running(), 2);
  EXPECT_EQ(b.reserved(), 200 * kMiB);
  EXPECT_EQ(
      refusal_of(b, 100 * kMiB),
      "the request (64x64, endless) needs about 100.0 MiB beside the loaded weights, but the 2 requests "
      "this engine runs hold 200.0 MiB of the max-memory limit of 250.0 MiB for all requests together, "
      "leaving 50.0 MiB: it is refused and they go on. Start it when one of them has ended, or raise the "
      "limit with max-memory / --max-memory if the estimate is too cautious for this machine.");
  EXPECT_EQ(b.running(), 2) << "the refused one holds nothing";
  EXPECT_EQ(b.reserved(), 200 * kMiB);
  { StreamBudget::Reservation gone = std::move(one); }  // the first stream ends
  EXPECT_EQ(b.running(), 1);
  StreamBudget::Reservation three = b.admit(100 * kMiB, "64x64, endless");
  EXPECT_EQ(b.reserved(), 200 * kMiB);
}

TEST(StreamBudget, ARequestLargerThanTheWholeBudgetIsRefusedAloneToo) {
  StreamBudget b(50 * kMiB, [] { return int64_t(0); });
  EXPECT_EQ(
      refusal_of(b, 100 * kMiB),
      "the request (64x64, endless) needs about 100.0 MiB beside the loaded weights, but that is more than "
      "the max-memory limit of 50.0 MiB for all requests together. Ask for less, or raise the limit with "
      "max-memory / "
      "--max-memory if the estimate is too cautious for this machine.");
}

TEST(StreamBudget, SixtyFourStreamsAskedAtOnceAreAdmittedUpToWhatFitsAndTheRestRefused) {
  StreamBudget b(1000 * kMiB, [] { return int64_t(0); });
  std::vector<std::unique_ptr<StreamBudget::Reservation>> held(64);
  std::vector<std::string> refused(64);
  std::vector<std::thread> asks;
  for (int i = 0; i < 64; ++i) {
    asks.emplace_back([&, i] {
      try {
        held[i] = std::make_unique<StreamBudget::Reservation>(b.admit(70 * kMiB, "256x160, endless"));
      } catch (const Error& e) {
        refused[i] = e.what();
      }
    });
  }
  for (auto& t : asks) t.join();
  int admitted = 0;
  for (int i = 0; i < 64; ++i) {
    if (held[i]) {
      ++admitted;
      EXPECT_TRUE(refused[i].empty());
    } else {
      EXPECT_NE(
          refused[i].find("needs about 70.0 MiB beside the loaded weights, but the 14 requests this engine "
                          "runs hold 980.0 MiB of the max-memory limit of 1000.0 MiB"),
          std::string::npos)
          << refused[i];
    }
  }
  EXPECT_EQ(admitted, 14);  // 14 x 70 MiB = 980 MiB of 1000
  EXPECT_EQ(b.running(), 14);
  held.clear();
  EXPECT_EQ(b.running(), 0);
  EXPECT_EQ(b.reserved(), 0);
}

TEST(StreamBudget, WithoutMaxMemoryTheBudgetIsWhatWasAvailableWhenTheFirstRequestStarted) {
  std::atomic<int64_t> available{300 * kMiB};
  StreamBudget b(0, [&] { return available.load(); });
  StreamBudget::Reservation one = b.admit(100 * kMiB, "64x64, endless");
  available = 100 * kMiB;  // what the first one took is no longer available, but it is its own
  StreamBudget::Reservation two = b.admit(100 * kMiB, "64x64, endless");
  StreamBudget::Reservation three = b.admit(100 * kMiB, "64x64, endless");
  EXPECT_EQ(
      refusal_of(b, 10 * kMiB),
      "the request (64x64, endless) needs about 10.0 MiB beside the loaded weights, but the 3 requests this "
      "engine runs hold 300.0 MiB of 300.0 MiB that was available when the first of them started, leaving "
      "0.0 MiB: it is refused and they go on. Start it when one of them has ended, or raise the limit with "
      "max-memory / --max-memory if the estimate is too cautious for this machine.");
  { StreamBudget::Reservation a = std::move(one), b2 = std::move(two), c = std::move(three); }
  // Idle again: the next request measures anew.
  EXPECT_EQ(
      refusal_of(b, 150 * kMiB),
      "the request (64x64, endless) needs about 150.0 MiB beside the loaded weights, but that is more than "
      "100.0 MiB available (MemAvailable, or the cgroup's memory.max). Ask for less, or raise the limit with "
      "max-memory / "
      "--max-memory if the estimate is too cautious for this machine.");
  available = 0;  // nothing known: not refused
  EXPECT_EQ(b.admit(150 * kMiB, "64x64, endless").bytes(), 150 * kMiB);
}

}  // namespace
}  // namespace h3
