// The hand-over of requests to rank 0's thread (engine/process/job_slot.h). The ordering that once
// crashed rank 0 is forced here on every run: a world formed again starts taking after its last
// job's caller has left, and must wait for the next offer instead of running that job again
// (with its caller's token gone).
#include "engine/process/job_slot.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "h3/error.h"

namespace h3::engine_detail {
namespace {

DispatchedJob job_with(const std::string& prompt, const StreamControl* token) {
  DispatchedJob d;
  d.job.kind = Job::Kind::kGenerate;
  d.job.request.prompt = prompt;
  d.cancel = token;
  return d;
}

// Rank 0's serving loop: waits for an offer (or close) and takes it.
std::optional<DispatchedJob> wait_and_take(JobSlot& slot) {
  slot.wait_for_work([](size_t pending, bool closed) { return pending > 0 || closed; });
  return slot.take();
}

TEST(JobSlot, RankZeroTakesTheOfferedJobWithItsCallersToken) {
  JobSlot slot;
  slot.open_for_jobs();
  StreamControl token;
  auto taker = std::async(std::launch::async, [&] { return wait_and_take(slot); });
  slot.wait_until_taking();
  const uint64_t offer = slot.offer(job_with("a kite", &token));
  ASSERT_NE(offer, 0u);
  const std::optional<DispatchedJob> got = taker.get();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->job.request.prompt, "a kite");
  EXPECT_EQ(got->cancel, &token);
  EXPECT_EQ(got->offer, offer);
  EXPECT_FALSE(slot.withdraw(offer)) << "a taken job is no longer in the slot";
}

TEST(JobSlot, AWorldFormedAgainWaitsForTheNextOfferInsteadOfRunningTheLastJobAgain) {
  JobSlot slot;
  // The first world: its rank 0 takes request A; A's caller returns and its token is gone.
  slot.open_for_jobs();
  {
    StreamControl token_a;
    const uint64_t offer = slot.offer(job_with("A", &token_a));
    ASSERT_NE(offer, 0u);
    const std::optional<DispatchedJob> a = slot.take();
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->job.request.prompt, "A");
    EXPECT_FALSE(slot.withdraw(offer));
  }
  // The world breaks (a worker was killed) and forms again: the new rank 0 serves from scratch
  // and looks for work *before* the next request is offered — the interleaving that crashed.
  EXPECT_TRUE(slot.close_for_jobs().empty());
  slot.open_for_jobs();
  auto taker = std::async(std::launch::async, [&] { return wait_and_take(slot); });
  // Returns only once the new rank 0 waits with nothing to take: it did not pick A up again.
  slot.wait_until_taking();
  StreamControl token_b;
  ASSERT_NE(slot.offer(job_with("B", &token_b)), 0u);
  const std::optional<DispatchedJob> b = taker.get();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->job.request.prompt, "B");
  EXPECT_EQ(b->cancel, &token_b);
}

TEST(JobSlot, AWithdrawnOfferIsNeverTaken) {
  JobSlot slot;
  slot.open_for_jobs();
  StreamControl t1, t2;
  const uint64_t withdrawn = slot.offer(job_with("withdrawn", &t1));
  ASSERT_NE(withdrawn, 0u);
  EXPECT_TRUE(slot.withdraw(withdrawn));
  ASSERT_NE(slot.offer(job_with("next", &t2)), 0u);
  const std::optional<DispatchedJob> got = slot.take();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->job.request.prompt, "next");
  EXPECT_EQ(got->cancel, &t2);
}

TEST(JobSlot, OffersAreRefusedWhileNoRankZeroServesAndAnUntakenOneComesBack) {
  JobSlot slot;
  StreamControl token;
  EXPECT_EQ(slot.offer(job_with("before the world formed", &token)), 0u);
  slot.open_for_jobs();
  ASSERT_NE(slot.offer(job_with("never taken", &token)), 0u);
  ASSERT_NE(slot.offer(job_with("nor this", &token)), 0u);
  // Rank 0's world broke before it took the offers: they come back for their callers' answers.
  const std::vector<DispatchedJob> orphans = slot.close_for_jobs();
  ASSERT_EQ(orphans.size(), 2u);
  EXPECT_EQ(orphans[0].job.request.prompt, "never taken");
  EXPECT_EQ(orphans[1].job.request.prompt, "nor this");
  EXPECT_EQ(slot.offer(job_with("after it broke", &token)), 0u);
  slot.wait_until_taking();  // returns at once: nobody serves
}

TEST(JobSlot, OffersOfManyCallersAreTakenInTheOrderTheyCameAndEachWithdrawsItsOwn) {
  JobSlot slot;
  slot.open_for_jobs();
  StreamControl t1, t2, t3;
  const uint64_t a = slot.offer(job_with("first", &t1));
  const uint64_t b = slot.offer(job_with("second", &t2));
  const uint64_t c = slot.offer(job_with("third", &t3));
  EXPECT_EQ(slot.pending(), 3u);
  EXPECT_TRUE(a != b && b != c && a != c);
  EXPECT_TRUE(slot.withdraw(b)) << "the second caller left before rank 0 took its job";
  EXPECT_FALSE(slot.withdraw(b));
  const std::optional<DispatchedJob> one = slot.take();
  const std::optional<DispatchedJob> two = slot.take();
  ASSERT_TRUE(one && two);
  EXPECT_EQ(one->cancel, &t1);
  EXPECT_EQ(two->cancel, &t3);
  EXPECT_FALSE(slot.take().has_value());
  EXPECT_FALSE(slot.withdraw(a));
  EXPECT_FALSE(slot.withdraw(c));
}

TEST(JobSlot, ARingWakesRankZeroToLookAgain) {
  JobSlot slot;
  slot.open_for_jobs();
  std::atomic<bool> answered{false};
  auto waiter = std::async(std::launch::async, [&] {
    slot.wait_for_work([&](size_t pending, bool closed) { return pending > 0 || closed || answered.load(); });
    return answered.load();
  });
  slot.wait_until_taking();
  answered = true;  // a caller answered a hand-over: no offer, no close
  slot.ring();
  EXPECT_TRUE(waiter.get());
}

TEST(JobSlot, CloseWakesEveryWaitAndWinsOverAnOfferedJob) {
  JobSlot slot;
  slot.open_for_jobs();
  auto taker = std::async(std::launch::async, [&] { return wait_and_take(slot); });
  auto rejoiner = std::async(std::launch::async, [&] { return slot.wait_for_rejoin(); });
  slot.wait_until_taking();
  slot.close();
  EXPECT_FALSE(taker.get().has_value());
  EXPECT_FALSE(rejoiner.get());
  StreamControl token;
  EXPECT_EQ(slot.offer(job_with("after close", &token)), 0u);
  EXPECT_FALSE(slot.take().has_value());

  JobSlot both;
  both.open_for_jobs();
  ASSERT_NE(both.offer(job_with("offered", &token)), 0u);
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
