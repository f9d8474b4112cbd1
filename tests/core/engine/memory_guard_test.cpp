// The memory guard (engine/memory_guard.h): a request estimated above the limit is refused from
// its plan, before anything is allocated, with numbers that hold: the length and the size it
// names do fit, one frame more does not.
#include "engine/memory_guard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <tuple>

#include "common/cpu_attention.h"
#include "common/error.h"
#include "dit/layers.h"
#include "engine/engine.h"
#include "engine_test_util.h"

namespace h3 {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;

GenerationRequest request(int64_t width, int64_t height, int64_t frames) {
  GenerationRequest r;
  r.prompt = "a lighthouse";
  r.width = width;
  r.height = height;
  r.num_frames = frames;
  r.steps = 4;
  return r;
}

ModelInfo tiny() {
  return read_model(default_model_dir());
}

TEST(MemoryGuard, TheEstimateCountsTheDitRowsOfThePlanAndGrowsWithLengthSizeAndRanks) {
  const ModelInfo m = tiny();
  const ClipPlan p = make_plan(m, request(256, 160, 49));
  const MemoryEstimate e = estimate_request_memory(m, p, MemoryShape{});
  // Rows: the text reserve, two audio rows per audio latent, one video row per 2x2 latents.
  EXPECT_EQ(e.dit_rows, kTextRowsReserve + 2 * p.audio_latents + p.latent_frames * (160 / 32) * (256 / 32));
  EXPECT_GT(e.dit_bytes, 0);
  EXPECT_GT(e.decode_bytes, 0);
  EXPECT_GT(e.state_bytes, 0);
  EXPECT_EQ(e.margin_bytes, (e.state_bytes + e.dit_bytes + e.decode_bytes) / 10 + (int64_t{64} << 20));
  EXPECT_EQ(e.peak(), e.state_bytes + e.dit_bytes + e.decode_bytes + e.margin_bytes);

  const MemoryEstimate longer =
      estimate_request_memory(m, make_plan(m, request(256, 160, 400)), MemoryShape{});
  EXPECT_GT(longer.dit_bytes, e.dit_bytes);
  EXPECT_EQ(longer.decode_bytes, e.decode_bytes) << "the decode holds one clip, whatever the length";
  const MemoryEstimate wider =
      estimate_request_memory(m, make_plan(m, request(1024, 640, 49)), MemoryShape{});
  EXPECT_GT(wider.decode_bytes, 10 * e.decode_bytes);
  MemoryShape two;
  two.ranks_here = 2;
  two.tp = 2;
  EXPECT_GT(estimate_request_memory(m, p, two).peak(), e.peak());
  MemoryShape bf16;
  bf16.activation_bytes = 2;
  EXPECT_LT(estimate_request_memory(m, p, bf16).dit_bytes, e.dit_bytes);
}

// The shape the engine and each worker build from their options.
TEST(MemoryGuard, AShapeIsTheProcessShareOfItsWorld) {
  // (ranks_here, tp, activation_bytes, on_gpus, cpu_threads)
  auto fields = [](const MemoryShape& m) {
    return std::make_tuple(m.ranks_here, m.tp, m.activation_bytes, m.on_gpus, m.cpu_threads);
  };
  EXPECT_EQ(fields(memory_shape_of(1, 8, 2, "bf16", "cuda", 0)), std::make_tuple(1, 4, 2, true, 1));
  EXPECT_EQ(fields(memory_shape_of(2, 2, 1, "fp32", "cpu", 3)), std::make_tuple(2, 2, 4, false, 3));
}

// In fp32 on the CPU each intra-op thread of a rank holds one block of attention scores
// (common/cpu_attention.h): 512 queries over every row, per thread, up to the tasks there are.
TEST(MemoryGuard, OnTheCpuEachThreadCountsOneBlockOfAttentionScores) {
  const ModelInfo m = tiny();
  const ClipPlan p = make_plan(m, request(256, 160, 49));
  const MemoryEstimate one = estimate_request_memory(m, p, MemoryShape{});
  const int64_t rows = one.dit_rows, heads = m.dit.num_heads;
  const int64_t block = cpu_attention_block_rows(rows, rows, dit::kDefaultScoreElements);
  const int64_t tasks = heads * ((rows + block - 1) / block);
  ASSERT_GT(tasks, 4);
  MemoryShape four;
  four.cpu_threads = 4;
  EXPECT_EQ(estimate_request_memory(m, p, four).dit_bytes - one.dit_bytes, 3 * block * rows * 4);
  MemoryShape many;
  many.cpu_threads = static_cast<int>(tasks) + 10;  // no more blocks than tasks at once
  EXPECT_EQ(estimate_request_memory(m, p, many).dit_bytes - one.dit_bytes, (tasks - 1) * block * rows * 4);
  // bf16 and GPUs run LibTorch's fused kernel: no score blocks.
  MemoryShape bf16 = four;
  bf16.activation_bytes = 2;
  MemoryShape bf16_one;
  bf16_one.activation_bytes = 2;
  EXPECT_EQ(estimate_request_memory(m, p, bf16).dit_bytes, estimate_request_memory(m, p, bf16_one).dit_bytes);
}

// device = cuda: the host holds what comes back from the GPUs, not their work. The DiT's and the
// encoders' terms are 0 (the rows are still counted), the decode's is rank 0's uint8 frames of one
// clip (the pixels' area times the clip's frames, whatever the length or the ranks), and a request
// the host could never compute fits there when the GPUs do the work.
TEST(MemoryGuard, OnGpusTheHostCountsTheFramesThatComeBackNotTheWork) {
  const ModelInfo m = tiny();
  const ClipPlan p = make_plan(m, request(256, 160, 49));
  MemoryShape gpus;
  gpus.on_gpus = true;
  const MemoryEstimate cpu = estimate_request_memory(m, p, MemoryShape{});
  const MemoryEstimate e = estimate_request_memory(m, p, gpus);
  EXPECT_EQ(e.dit_rows, cpu.dit_rows);
  EXPECT_EQ(e.dit_bytes, 0);
  EXPECT_EQ(e.conditioning_bytes, 0);
  EXPECT_EQ(e.state_bytes, cpu.state_bytes);
  EXPECT_GT(e.decode_bytes, 0);
  EXPECT_EQ(e.decode_bytes % (256 * 160 * 3), 0) << "whole uint8 frames of the canvas";
  EXPECT_LT(e.decode_bytes, cpu.decode_bytes / 4);
  EXPECT_EQ(e.peak(), e.state_bytes + e.decode_bytes + e.margin_bytes);
  EXPECT_EQ(estimate_request_memory(m, make_plan(m, request(256, 160, 400)), gpus).decode_bytes,
            e.decode_bytes);
  EXPECT_EQ(estimate_request_memory(m, make_plan(m, request(1024, 640, 49)), gpus).decode_bytes,
            16 * e.decode_bytes);
  MemoryShape eight = gpus;
  eight.ranks_here = 8;
  eight.tp = 8;
  EXPECT_EQ(estimate_request_memory(m, p, eight).decode_bytes, e.decode_bytes);
  EXPECT_EQ(estimate_request_memory(m, p, eight).dit_bytes, 0);

  const GenerationRequest big = request(1344, 768, 243);
  const ClipPlan bp = make_plan(m, big);
  const int64_t limit = estimate_request_memory(m, bp, gpus).peak();
  EXPECT_GT(estimate_request_memory(m, bp, MemoryShape{}).peak(), 2 * limit);
  EXPECT_NO_THROW(check_request_memory(m, big, bp, gpus, limit));
  try {
    check_request_memory(m, big, bp, MemoryShape{}, limit);
    FAIL() << "expected kOutOfMemory on the CPU";
  } catch (const Error& x) {
    EXPECT_EQ(x.kind(), ErrorKind::kOutOfMemory);
    EXPECT_THAT(x.what(), HasSubstr("needs about"));
  }
}

// The request that grew to 24 GB until the OOM killer ended it: every value inside the ranges.
TEST(MemoryGuard, TheRequestThatWasKilledByTheOomKillerIsEstimatedAboveThatMachine) {
  const ModelInfo m = tiny();
  const ClipPlan p = make_plan(m, request(4096, 4096, 1024));
  EXPECT_GT(estimate_request_memory(m, p, MemoryShape{}).peak(), 24 * kGiB);
}

TEST(MemoryGuard, ARefusalNamesTheLimitAndALengthAndSizeThatDoFit) {
  const ModelInfo m = tiny();
  const GenerationRequest req = request(1024, 1024, 400);
  const ClipPlan p = make_plan(m, req);
  const int64_t need = estimate_request_memory(m, p, MemoryShape{}).peak();
  EXPECT_NO_THROW(check_request_memory(m, req, p, MemoryShape{}, need));
  const int64_t limit = need - 1;
  try {
    check_request_memory(m, req, p, MemoryShape{}, limit);
    FAIL() << "expected kOutOfMemory";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfMemory);
    const std::string msg = e.what();
    EXPECT_THAT(msg, HasSubstr("1024x1024, 400 frames"));
    EXPECT_THAT(msg, HasSubstr(format_bytes(need)));
    EXPECT_THAT(msg, HasSubstr("max-memory limit"));
    // "At 1024x1024 at most N frames fit": N fits, N + 1 does not.
    const std::string key = "At 1024x1024 at most ";
    const size_t at = msg.find(key);
    ASSERT_NE(at, std::string::npos) << msg;
    const int64_t n = std::stoll(msg.substr(at + key.size()));
    ASSERT_GE(n, 1);
    ASSERT_LT(n, 400);
    EXPECT_LE(estimate_request_memory(m, make_plan(m, request(1024, 1024, n)), MemoryShape{}).peak(), limit);
    EXPECT_GT(estimate_request_memory(m, make_plan(m, request(1024, 1024, n + 1)), MemoryShape{}).peak(),
              limit);
    // "at 400 frames at most WxH fits": that size fits.
    const std::string key2 = "at 400 frames at most ";
    const size_t at2 = msg.find(key2);
    ASSERT_NE(at2, std::string::npos) << msg;
    int w = 0, h = 0;
    ASSERT_EQ(std::sscanf(msg.c_str() + at2 + key2.size(), "%dx%d", &w, &h), 2) << msg;
    EXPECT_LT(w, 1024);
    EXPECT_EQ(w, h) << "the aspect is kept";
    EXPECT_LE(estimate_request_memory(m, make_plan(m, request(w, h, 400)), MemoryShape{}).peak(), limit);
  }
}

TEST(MemoryGuard, NoLengthFitsWhenOneClipOfDecodeIsAlreadyTooLarge) {
  const ModelInfo m = tiny();
  const GenerationRequest req = request(4096, 4096, 100);
  const ClipPlan p = make_plan(m, req);
  const MemoryEstimate e = estimate_request_memory(m, p, MemoryShape{});
  try {
    check_request_memory(m, req, p, MemoryShape{}, e.decode_bytes / 2);
    FAIL() << "expected kOutOfMemory";
  } catch (const Error& x) {
    EXPECT_EQ(x.kind(), ErrorKind::kOutOfMemory);
    EXPECT_THAT(x.what(), HasSubstr("No length fits at 4096x4096"));
    EXPECT_THAT(x.what(), HasSubstr("the video decode of one clip"));
  }
}

TEST(MemoryGuard, TheAvailableMemoryIsReadFromThisMachine) {
  const int64_t avail = available_memory_bytes();
  EXPECT_GT(avail, 64 * (int64_t{1} << 20)) << "a test machine has more than 64 MiB free";
  EXPECT_LT(avail, int64_t{1} << 50);
}

TEST(MemoryGuard, ByteCountsTakeBinarySuffixes) {
  EXPECT_EQ(parse_bytes("1073741824", "x"), kGiB);
  EXPECT_EQ(parse_bytes("8G", "x"), 8 * kGiB);
  EXPECT_EQ(parse_bytes("8GiB", "x"), 8 * kGiB);
  EXPECT_EQ(parse_bytes("512M", "x"), 512 * (int64_t{1} << 20));
  EXPECT_EQ(parse_bytes("1.5G", "x"), 3 * kGiB / 2);
  EXPECT_EQ(parse_bytes("2T", "x"), 2 * 1024 * kGiB);
  for (const char* bad : {"", "G", "-1", "8X", "8 G", "ten", "1e30"}) {
    try {
      parse_bytes(bad, "--max-memory");
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr("--max-memory"));
    }
  }
  EXPECT_EQ(format_bytes(3 * kGiB / 2), "1.5 GiB");
  EXPECT_EQ(format_bytes(512 * (int64_t{1} << 20)), "512.0 MiB");
}

// Through the engine: its plan() refuses before any rank does any work, and the engine serves the
// next request that fits.
TEST(MemoryGuard, TheEngineRefusesAtPlanAndServesTheNextRequest) {
  EngineOptions o;
  o.model_dir = default_model_dir();
  o.max_memory = 4 * kGiB;
  auto engine = Engine::open(o);
  try {
    engine->plan(request(4096, 4096, 1024));
    FAIL() << "expected kOutOfMemory";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfMemory);
    EXPECT_THAT(e.what(), HasSubstr("4.0 GiB is the max-memory limit"));
  }
  test::CollectSink sink;
  CancelToken cancel;
  engine->generate(request(64, 48, 5), sink, {}, cancel);
  EXPECT_EQ(sink.frames_so_far, 5);
  EXPECT_TRUE(sink.seen_final);
}

}  // namespace
}  // namespace h3
