// Many requests in flight on one engine (docs/engine.md, "Many streams"): each stream's frames
// and soundtrack are byte for byte what it gives alone, at 1 and 2 ranks, and a stream's error,
// cancel or refusal touches that stream only.
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <map>
#include <memory>
#include <stdexcept>

#include "dit/config.h"
#include "dit/random_model.h"
#include "engine/planning/memory_guard.h"
#include "engine_test_util.h"
#include "streams_test_util.h"

namespace h3 {
namespace {

using streams_test::expect_same_stream;
using streams_test::run_stream;
using streams_test::run_together;
using streams_test::StreamResult;
using streams_test::StreamSpec;
using streams_test::three_streams;

// One engine per rank count for this program, and each of the three streams alone on it.
struct Alone {
  std::unique_ptr<Engine> engine;
  std::vector<StreamResult> streams;
};

Alone& alone(int ranks) {
  static std::map<int, Alone> cache;
  Alone& a = cache[ranks];
  if (!a.engine) {
    a.engine = test::open_tiny(ranks);
    for (const StreamSpec& s : three_streams()) a.streams.push_back(run_stream(*a.engine, s));
  }
  return a;
}

void expect_three_streams_as_alone(int ranks) {
  Alone& a = alone(ranks);
  const std::vector<StreamSpec> specs = three_streams();
  // What each gives alone is what it asked for.
  for (const StreamResult& r : a.streams) ASSERT_FALSE(r.error) << r.error_text();
  EXPECT_EQ(a.streams[0].all_frames().sizes(), (std::vector<int64_t>{30, 48, 80, 3}));
  EXPECT_EQ(a.streams[1].all_frames().sizes(), (std::vector<int64_t>{39, 64, 64, 3}));
  EXPECT_EQ(a.streams[2].all_frames().sizes(), (std::vector<int64_t>{4 * 17, 48, 96, 3}));
  EXPECT_EQ(a.streams[2].prompt_chunks, std::vector<int64_t>{2});
  for (const StreamResult& r : a.streams) EXPECT_GT(r.all_audio().size(0), 0);
  const std::vector<StreamResult> together = run_together(*a.engine, specs);
  for (size_t i = 0; i < specs.size(); ++i) expect_same_stream(together[i], a.streams[i], specs[i].name);
}

TEST(EngineStreams, ThreeStreamsTogetherGiveEachTheBytesItGivesAloneAtOneRank) {
  expect_three_streams_as_alone(1);
}

TEST(EngineStreams, ThreeStreamsTogetherGiveEachTheBytesItGivesAloneAtTwoRanks) {
  expect_three_streams_as_alone(2);
}

TEST(EngineStreams, AStreamWhoseSinkThrowsFailsAloneAndTheOthersGoOn) {
  Alone& a = alone(2);
  std::vector<StreamSpec> specs = three_streams();
  specs[1].on_chunk = [](int64_t index) {
    if (index == 1) throw std::runtime_error("the consumer of the causal clip went away");
  };
  const std::vector<StreamResult> together = run_together(*a.engine, specs);
  ASSERT_TRUE(together[1].error);
  EXPECT_EQ(together[1].error_text(), "the consumer of the causal clip went away");
  EXPECT_EQ(together[1].frames.size(), 2u) << "it stopped at the chunk whose sink threw";
  expect_same_stream(together[0], a.streams[0], specs[0].name);
  expect_same_stream(together[2], a.streams[2], specs[2].name);
}

TEST(EngineStreams, ACancelledStreamEndsAtItsStepAndTheOthersGoOn) {
  Alone& a = alone(2);
  std::vector<StreamSpec> specs = three_streams();
  specs[0].on_progress = [](const Progress& p, StreamControl& t) {
    if (p.phase == Phase::kDenoising && p.step == 2) t.cancel();
  };
  const std::vector<StreamResult> together = run_together(*a.engine, specs);
  ASSERT_TRUE(together[0].error);
  EXPECT_EQ(together[0].error_kind(), ErrorKind::kCancelled);
  EXPECT_EQ(together[0].error_text(), "cancelled during denoising (after step 2 of 3)");
  EXPECT_TRUE(together[0].frames.empty());
  expect_same_stream(together[1], a.streams[1], specs[1].name);
  expect_same_stream(together[2], a.streams[2], specs[2].name);
  // And the engine serves the next request as before.
  expect_same_stream(run_stream(*a.engine, specs[2]), a.streams[2], specs[2].name + " afterwards");
}

// A random LoRA for the tiny model, written once per test program.
const std::string& streams_lora() {
  static const test::TempDir dir("streams-lora");
  static const std::string path = [] {
    const std::string d = dir / "lora";
    dit::write_random_lora(d, dit::DitConfig::load(default_model_dir() + "/transformer"), 4, 8.0, 2030);
    return d;
  }();
  return path;
}

TEST(EngineStreams, ARequestWithAnotherLoraIsRefusedWhileOthersRunAndTheyGoOn) {
  Alone& a = alone(1);
  std::vector<StreamSpec> specs = three_streams();
  std::promise<void> started, refused;
  std::shared_future<void> refused_f = refused.get_future().share();
  bool first = true;
  const auto change = specs[2].on_progress;
  specs[2].on_progress = [&](const Progress& p, StreamControl& t) {
    if (first && p.phase == Phase::kDenoising) {
      first = false;
      started.set_value();
      EXPECT_EQ(refused_f.wait_for(std::chrono::seconds(300)), std::future_status::ready);
    }
    change(p, t);
  };
  StreamResult endless;
  std::thread runner([&] { endless = run_stream(*a.engine, specs[2]); });
  ASSERT_EQ(started.get_future().wait_for(std::chrono::seconds(300)), std::future_status::ready);
  StreamSpec adapted = specs[0];
  adapted.request.lora = streams_lora();
  const StreamResult r = run_stream(*a.engine, adapted);
  refused.set_value();
  runner.join();
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error_kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(r.error_text(),
            "lora '" + streams_lora() +
                "': the 1 other request(s) this engine runs use lora none on the DiT they share; "
                "run this one when they have ended, or in an engine of its own");
  expect_same_stream(endless, a.streams[2], specs[2].name);
  // Alone, the adapted request runs (and changes the clip); the next one without it is as before.
  const StreamResult adapted_alone = run_stream(*a.engine, adapted);
  ASSERT_FALSE(adapted_alone.error) << adapted_alone.error_text();
  EXPECT_FALSE(at::equal(adapted_alone.all_frames(), a.streams[0].all_frames()));
  expect_same_stream(run_stream(*a.engine, specs[0]), a.streams[0], specs[0].name + " after the LoRA");
}

// ---- Memory: each request in flight holds its own estimate beside the shared weights ----

// An endless stream that runs until it has given `chunks` chunks.
StreamSpec small_endless(uint64_t seed, int64_t chunks) {
  StreamSpec s;
  s.name = "endless stream " + std::to_string(seed);
  s.request.prompt = "a white dot drifting";
  s.request.width = 64;
  s.request.height = 48;
  s.request.num_frames = kEndless;
  s.request.sampler = Sampler::kCausal;
  s.request.steps = 2;
  s.request.seed = seed;
  s.finish_after = chunks;
  return s;
}

// The tiny model at one rank with max-memory `streams` times one small_endless stream's estimate.
std::unique_ptr<Engine> open_for_streams(double streams, int64_t* need) {
  {
    auto probe = test::open_tiny(1);
    *need = probe->memory_estimate(probe->plan(small_endless(1, 1).request)).peak();
  }
  EngineOptions o;
  o.model_dir = default_model_dir();
  o.max_memory = static_cast<int64_t>(streams * static_cast<double>(*need));
  return Engine::open(o);
}

// Streams asked for at once: the admitted ones hold at their first step until every ask was
// answered (admitted or refused), so that all are in flight together when the others ask.
struct Asks {
  std::mutex m;
  std::condition_variable cv;
  int admitted = 0, refused = 0, total = 0;
  void admitted_one() {
    std::unique_lock<std::mutex> lk(m);
    ++admitted;
    cv.notify_all();
    EXPECT_TRUE(cv.wait_for(lk, std::chrono::seconds(300), [&] { return admitted + refused == total; }))
        << "the other asks were never answered";
  }
  void refused_one() {
    std::lock_guard<std::mutex> lk(m);
    ++refused;
    cv.notify_all();
  }
};

std::vector<StreamResult> ask_at_once(Engine& e, int n, Asks& asks) {
  asks.total = n;
  std::vector<StreamResult> out(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      StreamSpec s = small_endless(100 + i, 3);
      bool first = true;
      s.on_progress = [&](const Progress& p, StreamControl&) {
        if (first && p.phase == Phase::kDenoising) {
          first = false;
          asks.admitted_one();
        }
      };
      out[i] = run_stream(e, s);
      if (out[i].error && out[i].frames.empty() && out[i].error_kind() == ErrorKind::kOutOfMemory)
        asks.refused_one();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(EngineStreams, AMaxMemoryThatHoldsTwoStreamsRefusesTheThirdWithTheNumbersAndTheTwoGoOn) {
  int64_t need = 0;
  auto e = open_for_streams(2.5, &need);
  Asks asks;
  const std::vector<StreamResult> out = ask_at_once(*e, 3, asks);
  EXPECT_EQ(asks.admitted, 2);
  EXPECT_EQ(asks.refused, 1);
  const std::string msg = "the request (64x48, endless) needs about " + format_bytes(need) +
                          " beside the loaded weights, but the 2 requests this engine runs hold " +
                          format_bytes(2 * need) + " of the max-memory limit of " +
                          format_bytes(static_cast<int64_t>(2.5 * static_cast<double>(need))) +
                          " for all requests together, leaving " +
                          format_bytes(static_cast<int64_t>(2.5 * static_cast<double>(need)) - 2 * need) +
                          ": it is refused and they go on.";
  for (int i = 0; i < 3; ++i) {
    const StreamSpec spec = small_endless(100 + i, 3);
    if (out[i].error) {
      EXPECT_EQ(out[i].error_text().rfind(msg, 0), 0u) << out[i].error_text();
      continue;
    }
    // The admitted ones went on to their end, each as it is alone.
    expect_same_stream(out[i], run_stream(*e, spec), spec.name);
  }
}

TEST(EngineStreams, EightStreamsAskedAtOnceAreAdmittedUpToWhatFitsAndTheRestRefused) {
  int64_t need = 0;
  auto e = open_for_streams(3.5, &need);
  Asks asks;
  const std::vector<StreamResult> out = ask_at_once(*e, 8, asks);
  EXPECT_EQ(asks.admitted, 3);
  EXPECT_EQ(asks.refused, 5);
  for (const StreamResult& r : out) {
    if (r.error) {
      EXPECT_NE(r.error_text().find("the 3 requests this engine runs hold " + format_bytes(3 * need)),
                std::string::npos)
          << r.error_text();
    } else {
      EXPECT_EQ(r.frames.size(), 3u);
    }
  }
}

// The count: 64 streams asked at once on the tiny default model, max-memory holding 3.5
// streams. Exactly 3 are admitted, each held at its first step until all 64 asks were answered;
// each of the 61 others is refused at its start with the numbers (what it needs, what the 3 hold,
// the limit, what is left) and no frame; the 3 go on to their third chunk, each the bytes it
// gives alone; and the engine admits a stream again once they ended.
TEST(EngineStreams, SixtyFourStreamsAskedAtOnceAreAdmittedUpToWhatFitsAndTheRestRefusedWithTheNumbers) {
  int64_t need = 0;
  auto e = open_for_streams(3.5, &need);
  Asks asks;
  const std::vector<StreamResult> out = ask_at_once(*e, 64, asks);
  EXPECT_EQ(asks.admitted, 3);
  EXPECT_EQ(asks.refused, 61);
  const int64_t limit = static_cast<int64_t>(3.5 * static_cast<double>(need));
  const std::string msg = "the request (64x48, endless) needs about " + format_bytes(need) +
                          " beside the loaded weights, but the 3 requests this engine runs hold " +
                          format_bytes(3 * need) + " of the max-memory limit of " + format_bytes(limit) +
                          " for all requests together, leaving " + format_bytes(limit - 3 * need) +
                          ": it is refused and they go on.";
  int refused = 0, served = 0;
  for (int i = 0; i < 64; ++i) {
    const StreamSpec spec = small_endless(100 + i, 3);
    if (out[i].error) {
      ++refused;
      EXPECT_EQ(out[i].error_kind(), ErrorKind::kOutOfMemory) << out[i].error_text();
      EXPECT_EQ(out[i].error_text().rfind(msg, 0), 0u) << out[i].error_text();
      EXPECT_TRUE(out[i].frames.empty()) << spec.name << " was refused after giving frames";
      continue;
    }
    ++served;
    ASSERT_EQ(out[i].frames.size(), 3u) << spec.name;
    expect_same_stream(out[i], run_stream(*e, spec), spec.name);
  }
  EXPECT_EQ(refused, 61);
  EXPECT_EQ(served, 3);
  if (refused > 0) {
    for (const StreamResult& r : out) {
      if (r.error) {
        std::printf("a refusal: %s\n", r.error_text().c_str());
        break;
      }
    }
  }
  const StreamResult again = run_stream(*e, small_endless(7, 2));
  EXPECT_FALSE(again.error) << again.error_text();
  EXPECT_EQ(again.frames.size(), 2u);
}

}  // namespace
}  // namespace h3
