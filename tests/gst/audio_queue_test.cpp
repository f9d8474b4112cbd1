// AudioQueue: the bounded queue of soundtrack stretches between the engine and h3src's audio pad.
#include "audio_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace {

using h3::AudioChunk;
using h3gst::AudioQueue;
using h3gst::AudioSlice;
using PopResult = AudioQueue::PopResult;

// `count` stereo sample frames from `first`; the left value of frame i is first + i, the right -(first + i).
AudioChunk make_stretch(int64_t first, int64_t count) {
  AudioChunk c;
  c.first_sample = first;
  c.count = count;
  auto* v = new float[static_cast<size_t>(count * 2)];
  for (int64_t i = 0; i < count; ++i) {
    v[2 * i] = static_cast<float>(first + i);
    v[2 * i + 1] = -static_cast<float>(first + i);
  }
  c.samples = std::shared_ptr<const float>(v, std::default_delete<const float[]>());
  return c;
}

template <typename Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 2000 && !pred(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return pred();
}

TEST(AudioQueue, SlicesStretchesIntoAtMostMaxSamplesInOrderThenEnd) {
  AudioQueue q(4);
  ASSERT_TRUE(q.push(make_stretch(0, 2500)));
  ASSERT_TRUE(q.push(make_stretch(2500, 100)));
  q.finish();
  int64_t next = 0;
  std::vector<int64_t> sizes;
  AudioSlice s;
  while (q.pop(&s, 1024) == PopResult::kSamples) {
    EXPECT_EQ(s.first_sample, next);
    EXPECT_EQ(s.channels, 2);
    EXPECT_EQ(s.data[0], static_cast<float>(next));
    EXPECT_EQ(s.data[2 * s.count - 1], -static_cast<float>(next + s.count - 1));
    next += s.count;
    sizes.push_back(s.count);
  }
  EXPECT_EQ(next, 2600);
  // A slice never spans two stretches: 1024, 1024, the first stretch's last 452, the second's 100.
  EXPECT_EQ(sizes, (std::vector<int64_t>{1024, 1024, 452, 100}));
  EXPECT_EQ(q.pop(&s, 1024), PopResult::kEnd);
}

TEST(AudioQueue, PushBlocksWhileFullUntilTheFrontStretchIsConsumed) {
  AudioQueue q(1);
  ASSERT_TRUE(q.push(make_stretch(0, 10)));
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    EXPECT_TRUE(q.push(make_stretch(10, 10)));
    pushed = true;
  });
  ASSERT_TRUE(eventually([&] { return q.blocked_producers() == 1; }));
  EXPECT_FALSE(pushed.load());
  AudioSlice s;
  ASSERT_EQ(q.pop(&s, 6), PopResult::kSamples);  // part of the stretch: it still counts
  EXPECT_EQ(q.blocked_producers(), 1);           // no room was made: the producer was not woken
  EXPECT_FALSE(pushed.load());
  ASSERT_EQ(q.pop(&s, 6), PopResult::kSamples);  // its last 4
  EXPECT_EQ(s.count, 4);
  EXPECT_TRUE(eventually([&] { return pushed.load(); }));
  producer.join();
  EXPECT_EQ(q.high_water_chunks(), 1u);
}

TEST(AudioQueue, FlushingWakesTheConsumerAndKeepsTheData) {
  AudioQueue q(2);
  std::atomic<int> result{-1};
  std::thread consumer([&] {
    AudioSlice s;
    result = static_cast<int>(q.pop(&s, 10));
  });
  ASSERT_TRUE(eventually([&] { return q.blocked_consumers() == 1; }));  // waiting in pop
  q.set_flushing(true);
  consumer.join();
  EXPECT_EQ(result.load(), static_cast<int>(PopResult::kFlushing));
  ASSERT_TRUE(q.push(make_stretch(0, 5)));
  q.set_flushing(false);
  AudioSlice s;
  ASSERT_EQ(q.pop(&s, 10), PopResult::kSamples);
  EXPECT_EQ(s.count, 5);
}

TEST(AudioQueue, AbortReleasesABlockedProducerAndDropsEverything) {
  AudioQueue q(1);
  ASSERT_TRUE(q.push(make_stretch(0, 5)));
  std::atomic<int> pushed{-1};
  std::thread producer([&] { pushed = q.push(make_stretch(5, 5)) ? 1 : 0; });
  ASSERT_TRUE(eventually([&] { return q.blocked_producers() == 1; }));  // waiting in push
  q.abort();
  producer.join();
  EXPECT_EQ(pushed.load(), 0);
  EXPECT_EQ(q.queued_chunks(), 0u);
  AudioSlice s;
  EXPECT_EQ(q.pop(&s, 10), PopResult::kFlushing);
  q.reset();
  EXPECT_TRUE(q.push(make_stretch(0, 1)));
}

TEST(AudioQueue, AFailureComesAfterTheQueuedSamples) {
  AudioQueue q(2);
  ASSERT_TRUE(q.push(make_stretch(0, 3)));
  q.fail({h3::ErrorKind::kFormat, "bad audio"});
  EXPECT_FALSE(q.push(make_stretch(3, 3)));
  AudioSlice s;
  ASSERT_EQ(q.pop(&s, 10), PopResult::kSamples);
  h3gst::EngineFailure f;
  ASSERT_EQ(q.pop(&s, 10, &f), PopResult::kError);
  EXPECT_EQ(f.kind, h3::ErrorKind::kFormat);
  EXPECT_EQ(f.message, "bad audio");
}

}  // namespace
