// FrameQueue: the bounded chunk queue between the engine and create().
#include "frame_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using h3::FrameChunk;
using h3gst::Frame;
using h3gst::FrameQueue;
using PopResult = FrameQueue::PopResult;

// A chunk of `count` 2x1 frames whose bytes all equal the frame's clip index.
FrameChunk make_chunk(int64_t index, int64_t first_frame, int64_t count) {
  FrameChunk c;
  c.index = index;
  c.first_frame = first_frame;
  c.count = count;
  c.width = 2;
  c.height = 1;
  auto* px = new uint8_t[static_cast<size_t>(count) * c.frame_bytes()];
  for (int64_t f = 0; f < count; ++f) {
    std::memset(px + f * c.frame_bytes(), static_cast<int>(first_frame + f), c.frame_bytes());
  }
  c.pixels = std::shared_ptr<const uint8_t>(px, std::default_delete<const uint8_t[]>());
  return c;
}

// Waits (bounded) until `pred` holds; the bound only guards against a hang.
template <typename Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 2000 && !pred(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return pred();
}

TEST(FrameQueue, PopsFramesInOrderWithTheirPixelsThenEnd) {
  FrameQueue q(4);
  ASSERT_TRUE(q.push(make_chunk(0, 0, 3)));
  ASSERT_TRUE(q.push(make_chunk(1, 3, 2)));
  q.finish();
  EXPECT_EQ(q.queued_frames(), 5);
  for (int64_t i = 0; i < 5; ++i) {
    Frame f;
    ASSERT_EQ(q.pop(&f), PopResult::kFrame);
    EXPECT_EQ(f.index, i);
    EXPECT_EQ(f.width, 2);
    EXPECT_EQ(f.data[0], i);
    EXPECT_EQ(f.data[5], i);
    EXPECT_EQ(f.chunk_start, i == 0 || i == 3);
  }
  Frame f;
  EXPECT_EQ(q.pop(&f), PopResult::kEnd);
  EXPECT_EQ(q.pop(&f), PopResult::kEnd);  // stays at the end
}

TEST(FrameQueue, AFrameKeepsItsChunkAliveAfterTheQueueDropsIt) {
  FrameQueue q(1);
  ASSERT_TRUE(q.push(make_chunk(0, 7, 1)));
  Frame f;
  ASSERT_EQ(q.pop(&f), PopResult::kFrame);
  q.abort();
  EXPECT_EQ(f.data[0], 7);
  EXPECT_EQ(f.keep.use_count(), 1);
}

TEST(FrameQueue, ProducerBlocksWhileFullUntilAWholeChunkIsConsumed) {
  FrameQueue q(2);
  ASSERT_TRUE(q.push(make_chunk(0, 0, 2)));
  ASSERT_TRUE(q.push(make_chunk(1, 2, 2)));
  // Order, not time: the consumer raises `room_made` just before the pop that finishes
  // chunk 0; a push that returned earlier (a per-frame bound, or none) sees it still down.
  std::atomic<bool> producing{false}, room_made{false}, pushed{false};
  std::thread producer([&] {
    producing = true;
    EXPECT_TRUE(q.push(make_chunk(2, 4, 2)));
    EXPECT_TRUE(room_made.load()) << "push returned before a whole chunk was consumed";
    pushed = true;
  });
  ASSERT_TRUE(eventually([&] { return producing.load(); }));
  Frame f;
  ASSERT_EQ(q.pop(&f), PopResult::kFrame);  // half of chunk 0: still two chunks waiting
  EXPECT_EQ(q.queued_chunks(), 2u);
  room_made = true;
  ASSERT_EQ(q.pop(&f), PopResult::kFrame);  // chunk 0 done: room for one
  EXPECT_TRUE(eventually([&] { return pushed.load(); }));
  producer.join();
  EXPECT_EQ(q.queued_chunks(), 2u);
  EXPECT_EQ(q.high_water_chunks(), 2u);
}

TEST(FrameQueue, ConsumerBlocksWhileEmptyUntilAChunkArrives) {
  FrameQueue q(2);
  std::atomic<bool> consuming{false}, pushing{false};
  std::atomic<int64_t> got{-1};
  std::thread consumer([&] {
    consuming = true;
    Frame f;
    EXPECT_EQ(q.pop(&f), PopResult::kFrame);
    EXPECT_TRUE(pushing.load()) << "pop returned before anything was pushed";
    got = f.index;
  });
  ASSERT_TRUE(eventually([&] { return consuming.load(); }));
  EXPECT_EQ(got.load(), -1);
  pushing = true;
  ASSERT_TRUE(q.push(make_chunk(0, 0, 1)));
  consumer.join();
  EXPECT_EQ(got.load(), 0);
}

TEST(FrameQueue, FlushingWakesTheConsumerAndKeepsTheFrames) {
  FrameQueue q(2);
  std::atomic<bool> consuming{false}, flushing{false}, woke{false};
  std::thread consumer([&] {
    consuming = true;
    Frame f;
    EXPECT_EQ(q.pop(&f), PopResult::kFlushing);
    EXPECT_TRUE(flushing.load()) << "pop returned before the flush";
    woke = true;
  });
  ASSERT_TRUE(eventually([&] { return consuming.load(); }));
  flushing = true;
  q.set_flushing(true);
  consumer.join();
  EXPECT_TRUE(woke.load());
  // While flushing, a producer still queues (it is not cancelled) and pop refuses.
  ASSERT_TRUE(q.push(make_chunk(0, 0, 1)));
  Frame f;
  EXPECT_EQ(q.pop(&f), PopResult::kFlushing);
  q.set_flushing(false);
  ASSERT_EQ(q.pop(&f), PopResult::kFrame);
  EXPECT_EQ(f.index, 0);
}

TEST(FrameQueue, AbortWakesABlockedProducerAndConsumerAndDropsEverything) {
  FrameQueue q(1);
  ASSERT_TRUE(q.push(make_chunk(0, 0, 3)));
  std::atomic<bool> producing{false}, aborting{false};
  std::atomic<int> results{0};
  std::thread producer([&] {
    producing = true;
    EXPECT_FALSE(q.push(make_chunk(1, 3, 3)));
    EXPECT_TRUE(aborting.load()) << "push gave up before the abort";
    ++results;
  });
  ASSERT_TRUE(eventually([&] { return producing.load(); }));
  aborting = true;
  q.abort();
  producer.join();
  EXPECT_EQ(results.load(), 1);
  EXPECT_EQ(q.queued_frames(), 0);
  Frame f;
  EXPECT_EQ(q.pop(&f), PopResult::kFlushing);
  EXPECT_FALSE(q.push(make_chunk(2, 6, 1)));
  q.reset();
  EXPECT_TRUE(q.push(make_chunk(0, 0, 1)));
  EXPECT_EQ(q.pop(&f), PopResult::kFrame);
}

TEST(FrameQueue, FailureComesAfterTheQueuedFramesWithItsCodeAndMessage) {
  FrameQueue q(2);
  ASSERT_TRUE(q.push(make_chunk(0, 0, 1)));
  q.fail({h3::ErrorKind::kDistributed, "rank 1 failed: out of memory"});
  EXPECT_FALSE(q.push(make_chunk(1, 1, 1)));
  Frame f;
  EXPECT_EQ(q.pop(&f), PopResult::kFrame);
  h3gst::EngineFailure failure;
  EXPECT_EQ(q.pop(&f, &failure), PopResult::kError);
  EXPECT_EQ(failure.kind, h3::ErrorKind::kDistributed);
  EXPECT_EQ(failure.message, "rank 1 failed: out of memory");
  q.finish();  // a later finish does not turn the error into an end
  EXPECT_EQ(q.pop(&f), PopResult::kError);
}

TEST(FrameQueue, PushAfterFinishIsRefusedAndEmptyChunksAreIgnored) {
  FrameQueue q(1);
  EXPECT_TRUE(q.push(make_chunk(0, 0, 0)));
  EXPECT_EQ(q.queued_chunks(), 0u);
  q.finish();
  EXPECT_FALSE(q.push(make_chunk(0, 0, 1)));
  Frame f;
  EXPECT_EQ(q.pop(&f), PopResult::kEnd);
}

TEST(FrameQueue, ASlowConsumerNeverSeesMoreThanTheBoundAndLosesNoFrame) {
  constexpr int kChunks = 40, kPerChunk = 3;
  FrameQueue q(2);
  std::thread producer([&] {
    for (int c = 0; c < kChunks; ++c) ASSERT_TRUE(q.push(make_chunk(c, c * kPerChunk, kPerChunk)));
    q.finish();
  });
  std::vector<int64_t> seen;
  for (;;) {
    Frame f;
    const PopResult r = q.pop(&f);
    if (r == PopResult::kEnd) break;
    ASSERT_EQ(r, PopResult::kFrame);
    EXPECT_LE(q.queued_chunks(), 2u);
    EXPECT_EQ(f.data[0], static_cast<uint8_t>(f.index));
    seen.push_back(f.index);
    if (seen.size() % 7 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  producer.join();
  ASSERT_EQ(seen.size(), static_cast<size_t>(kChunks * kPerChunk));
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], static_cast<int64_t>(i));
  EXPECT_EQ(q.high_water_chunks(), 2u);
}

TEST(FrameQueue, RaisingTheBoundReleasesABlockedProducer) {
  FrameQueue q(1);
  ASSERT_TRUE(q.push(make_chunk(0, 0, 1)));
  std::atomic<bool> producing{false}, raised{false};
  std::thread producer([&] {
    producing = true;
    EXPECT_TRUE(q.push(make_chunk(1, 1, 1)));
    EXPECT_TRUE(raised.load()) << "push returned while the queue was full";
  });
  ASSERT_TRUE(eventually([&] { return producing.load(); }));
  raised = true;
  q.set_max_chunks(2);
  producer.join();
  EXPECT_EQ(q.queued_chunks(), 2u);
}

}  // namespace
