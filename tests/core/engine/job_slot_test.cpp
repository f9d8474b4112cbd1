// The hand-over of a request to rank 0's thread (engine/job_slot.h). The ordering that once
// crashed rank 0 is forced here on every run: a world formed again starts taking after its last
// job's caller has left, and must wait for the next offer instead of running that job again
// (with its caller's token gone).
#include "engine/job_slot.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "common/error.h"

namespace h3::engine_detail {
namespace {

DispatchedJob job_with(const std::string& prompt, const CancelToken* token) {
  DispatchedJob d;
  d.job.kind = Job::Kind::kGenerate;
  d.job.request.prompt = prompt;
  d.cancel = token;
  return d;
}

TEST(JobSlot, RankZeroTakesTheOfferedJobWithItsCallersToken) {
  JobSlot slot;
  slot.open_for_jobs();
  CancelToken token;
  auto taker = std::async(std::launch::async, [&] { return slot.take(); });
  slot.wait_until_taking();
  ASSERT_TRUE(slot.offer(job_with("a kite", &token)));
  const std::optional<DispatchedJob> got = taker.get();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->job.request.prompt, "a kite");
  EXPECT_EQ(got->cancel, &token);
  EXPECT_FALSE(slot.withdraw()) << "a taken job is no longer in the slot";
}

TEST(JobSlot, AWorldFormedAgainWaitsForTheNextOfferInsteadOfRunningTheLastJobAgain) {
  JobSlot slot;
  // The first world: its rank 0 takes request A; A's caller returns and its token is gone.
  slot.open_for_jobs();
  {
    CancelToken token_a;
    ASSERT_TRUE(slot.offer(job_with("A", &token_a)));
    const std::optional<DispatchedJob> a = slot.take();
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->job.request.prompt, "A");
    EXPECT_FALSE(slot.withdraw());
  }
  // The world breaks (a worker was killed) and forms again: the new rank 0 serves from scratch
  // and looks for work *before* the next request is offered — the interleaving that crashed.
  EXPECT_FALSE(slot.close_for_jobs().has_value());
  slot.open_for_jobs();
  auto taker = std::async(std::launch::async, [&] { return slot.take(); });
  // Returns only once the new rank 0 waits with nothing to take: it did not pick A up again.
  slot.wait_until_taking();
  CancelToken token_b;
  ASSERT_TRUE(slot.offer(job_with("B", &token_b)));
  const std::optional<DispatchedJob> b = taker.get();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->job.request.prompt, "B");
  EXPECT_EQ(b->cancel, &token_b);
}

TEST(JobSlot, AWithdrawnOfferIsNeverTaken) {
  JobSlot slot;
  slot.open_for_jobs();
  CancelToken t1, t2;
  ASSERT_TRUE(slot.offer(job_with("withdrawn", &t1)));
  EXPECT_TRUE(slot.withdraw());
  ASSERT_TRUE(slot.offer(job_with("next", &t2)));
  const std::optional<DispatchedJob> got = slot.take();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->job.request.prompt, "next");
  EXPECT_EQ(got->cancel, &t2);
}

TEST(JobSlot, OffersAreRefusedWhileNoRankZeroServesAndAnUntakenOneComesBack) {
  JobSlot slot;
  CancelToken token;
  EXPECT_FALSE(slot.offer(job_with("before the world formed", &token)));
  slot.open_for_jobs();
  ASSERT_TRUE(slot.offer(job_with("never taken", &token)));
  // Rank 0's world broke before it took the offer: the offer comes back for its caller's answer.
  const std::optional<DispatchedJob> orphan = slot.close_for_jobs();
  ASSERT_TRUE(orphan.has_value());
  EXPECT_EQ(orphan->job.request.prompt, "never taken");
  EXPECT_FALSE(slot.offer(job_with("after it broke", &token)));
  slot.wait_until_taking();  // returns at once: nobody serves
}

TEST(JobSlot, TwoOffersAtOnceAreAnInternalError) {
  JobSlot slot;
  slot.open_for_jobs();
  CancelToken token;
  ASSERT_TRUE(slot.offer(job_with("first", &token)));
  try {
    slot.offer(job_with("second", &token));
    FAIL() << "expected h3::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
  }
}

TEST(JobSlot, CloseWakesEveryWaitAndWinsOverAnOfferedJob) {
  JobSlot slot;
  slot.open_for_jobs();
  auto taker = std::async(std::launch::async, [&] { return slot.take(); });
  auto rejoiner = std::async(std::launch::async, [&] { return slot.wait_for_rejoin(); });
  slot.wait_until_taking();
  slot.close();
  EXPECT_FALSE(taker.get().has_value());
  EXPECT_FALSE(rejoiner.get());
  CancelToken token;
  EXPECT_FALSE(slot.offer(job_with("after close", &token)));
  EXPECT_FALSE(slot.take().has_value());

  JobSlot both;
  both.open_for_jobs();
  ASSERT_TRUE(both.offer(job_with("offered", &token)));
  both.close();
  EXPECT_FALSE(both.take().has_value()) << "close wins over a job offered at the same time";
}

TEST(JobSlot, ARejoinRequestWakesTheWorldThreadOnce) {
  JobSlot slot;
  slot.request_rejoin();
  EXPECT_TRUE(slot.wait_for_rejoin());
  auto second = std::async(std::launch::async, [&] { return slot.wait_for_rejoin(); });
  slot.request_rejoin();
  EXPECT_TRUE(second.get());
}

}  // namespace
}  // namespace h3::engine_detail
