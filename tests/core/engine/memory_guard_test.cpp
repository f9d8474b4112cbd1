// The memory guard (engine/planning/memory_guard.h): a request estimated above the limit is refused from
// its plan, before anything is allocated, with numbers that hold: the length and the size it
// names do fit, one frame more does not.
#include "engine/planning/memory_guard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <tuple>

#include "common/cpu_attention.h"
#include "dit/layers.h"
#include "engine/engine.h"
#include "engine/planning/fit_plan.h"
#include "engine/planning/plan.h"
#include "engine_test_util.h"
#include "h3/error.h"

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

// ---- The causal sampler and endless streams ----

GenerationRequest causal(int64_t width, int64_t height, int64_t frames, int64_t window) {
  GenerationRequest r = request(width, height, frames);
  r.sampler = Sampler::kCausal;
  r.steps = 0;  // RAVEN's 4
  r.window = window;
  return r;
}

// The fit planner's KV cache for the same request on one rank's device (tp ranks, sp 1), fp32.
int64_t planner_kv(const ModelInfo& m, const ClipPlan& p, int tp) {
  PlanOptions o;
  o.ranks = tp;
  o.device_memory = int64_t{1} << 50;
  o.dtype_bytes = 4;
  for (const LayoutFit& f : plan_layouts(m, p, o)) {
    if (f.tp == tp && f.sp == 1) return f.kv_cache;
  }
  ADD_FAILURE() << "no TP" << tp << "xSP1 layout";
  return -1;
}

// A causal request attends a KV cache of the text reserve and cache_records - 1 chunks of the
// widest chunk's rows (a full chunk: 5 latents of 2x2 patches and 29 audio latents in two rows):
// the estimate grows with the window and the canvas, not with the length once the window is
// full, and its KV term is the fit planner's.
TEST(MemoryGuard, TheCausalEstimateGrowsWithTheWindowAndTheSizeAndItsKvCacheIsThePlanners) {
  const ModelInfo m = tiny();
  const dit::DitConfig& c = m.dit;
  const int64_t grid = (160 / 32) * (256 / 32);  // 2x2 patches of the 16x-downsampled canvas
  const int64_t chunk_rows = 5 * grid + 2 * 29;
  int64_t last_kv = 0, last_dit = 0, last_peak = 0;
  for (int64_t window = 0; window <= 4; ++window) {
    const ClipPlan p = make_plan(m, causal(256, 160, 141, window));  // 9 chunks: 8 full and a tail
    ASSERT_EQ(p.causal_chunks, 9);
    ASSERT_EQ(p.cache_records, 2 + window) << "sink 2 (the text and chunk 0) + the window";
    const MemoryEstimate e = estimate_request_memory(m, p, MemoryShape{});
    EXPECT_EQ(e.dit_rows, chunk_rows);
    EXPECT_EQ(e.kv_bytes,
              c.num_layers * (kTextRowsReserve + (1 + window) * chunk_rows) * 2 * c.inner_dim() * 4)
        << "window " << window;
    EXPECT_EQ(e.kv_bytes, planner_kv(m, p, 1)) << "window " << window;
    EXPECT_GT(e.kv_bytes, last_kv) << "window " << window;
    EXPECT_GE(e.dit_bytes - last_dit, e.kv_bytes - last_kv) << "the KV term is part of the DiT's";
    EXPECT_GT(e.peak(), last_peak) << "window " << window;
    last_kv = e.kv_bytes;
    last_dit = e.dit_bytes;
    last_peak = e.peak();
  }
  // Tensor parallelism: each rank holds its heads' share, as the planner counts it.
  MemoryShape tp2;
  tp2.tp = 2;
  const ClipPlan p2 = make_plan(m, causal(256, 160, 141, 2));
  ASSERT_EQ(c.num_heads % 2, 0);
  EXPECT_EQ(estimate_request_memory(m, p2, tp2).kv_bytes, planner_kv(m, p2, 2));
  EXPECT_EQ(2 * estimate_request_memory(m, p2, tp2).kv_bytes,
            estimate_request_memory(m, p2, MemoryShape{}).kv_bytes);
  // A larger canvas: wider chunks, a larger cache, a larger decode.
  const MemoryEstimate small = estimate_request_memory(m, p2, MemoryShape{});
  const ClipPlan big = make_plan(m, causal(512, 320, 141, 2));
  const MemoryEstimate large = estimate_request_memory(m, big, MemoryShape{});
  EXPECT_EQ(large.dit_rows, 4 * 5 * grid + 2 * 29);
  EXPECT_GT(large.kv_bytes, small.kv_bytes);
  EXPECT_EQ(large.kv_bytes, planner_kv(m, big, 1));
  EXPECT_GT(large.dit_bytes, small.dit_bytes);
  EXPECT_GT(large.peak(), small.peak());
  // The euler sampler keeps no cache.
  EXPECT_EQ(estimate_request_memory(m, make_plan(m, request(256, 160, 141)), MemoryShape{}).kv_bytes, 0);
}

// prompt-switch = recache keeps each kept chunk's commit input beside the cache (fp32 video
// latents and audio rows, CausalSampler::recache_bytes): the estimate counts them on every rank,
// in host memory also with GPUs; keep holds none.
TEST(MemoryGuard, ARecachingStreamCountsTheCommitInputsItKeeps) {
  const ModelInfo m = tiny();
  GenerationRequest r = causal(256, 160, kEndless, 2);
  const ClipPlan keep = make_plan(m, r);
  EXPECT_EQ(keep.prompt_switch, PromptSwitch::kKeep);
  r.prompt_switch = PromptSwitch::kRecache;
  const ClipPlan recache = make_plan(m, r);
  EXPECT_EQ(recache.prompt_switch, PromptSwitch::kRecache);
  ASSERT_EQ(recache.cache_records, 4);  // the text, chunk 0 and the window's 2
  // 3 chunks: 24 x 5 x 10 x 16 video latents and 2 x 29 x 32 audio rows, 4 bytes each (0.08 MiB).
  const int64_t per_chunk = (24 * 5 * 10 * 16 + 2 * 29 * 32) * 4;
  EXPECT_EQ(estimate_request_memory(m, keep, MemoryShape{}).recache_bytes, 0);
  const MemoryEstimate one = estimate_request_memory(m, recache, MemoryShape{});
  EXPECT_EQ(one.recache_bytes, 3 * per_chunk);
  EXPECT_GT(one.peak(), estimate_request_memory(m, keep, MemoryShape{}).peak());
  MemoryShape two;
  two.ranks_here = 2;
  EXPECT_EQ(estimate_request_memory(m, recache, two).recache_bytes, 2 * 3 * per_chunk);
  MemoryShape gpus;
  gpus.on_gpus = true;
  EXPECT_EQ(estimate_request_memory(m, recache, gpus).recache_bytes, 3 * per_chunk);
}

// An endless stream's plan has -1 for every length (num_frames, chunks, frames, evaluations,
// samples): its estimate reads none of them. It reserves the latents the stream keeps at a time
// (causal_engine_test.cpp measures them), and its KV cache is that of any clip long enough to
// fill the window.
TEST(MemoryGuard, AnEndlessEstimateReadsNoLengthAndEqualsALongClipsCache) {
  const ModelInfo m = tiny();
  const dit::DitConfig& c = m.dit;
  GenerationRequest r = causal(256, 160, kEndless, 2);
  const ClipPlan p = make_plan(m, r);
  ASSERT_TRUE(p.endless);
  ASSERT_EQ(p.num_frames, -1);
  ASSERT_EQ(p.causal_chunks, -1);
  ASSERT_EQ(p.audio_samples, -1);
  ASSERT_EQ(p.cache_records, 4);
  const MemoryEstimate e = estimate_request_memory(m, p, MemoryShape{});
  auto terms = [](const MemoryEstimate& x) {
    return std::make_tuple(x.dit_rows, x.dit_bytes, x.kv_bytes, x.decode_bytes, x.state_bytes,
                           x.conditioning_bytes, x.margin_bytes);
  };
  for (int64_t n : {int64_t{5}, int64_t{1000000}}) {
    ClipPlan q = p;
    q.num_frames = q.total_chunks = q.generated_frames = q.evaluations = q.causal_chunks = q.audio_samples =
        n;
    EXPECT_EQ(terms(estimate_request_memory(m, q, MemoryShape{})), terms(e)) << "the lengths set to " << n;
  }
  // Held at a time: the decode's clip of 7 latents, the 5 before it and 4 of the newest chunk
  // beyond it; 85 audio latents (three chunks) and the audio decoder's context either side. Five
  // copies (noise, latents, velocity, next step, the decode's), no waveform.
  EXPECT_EQ(endless_video_latents(m), 16);
  ASSERT_GT(m.audio_context_latents, 0);
  EXPECT_EQ(endless_audio_latents(m), 85 + 2 * m.audio_context_latents);
  std::printf(
      "an endless stream's reservation: %lld video latents, %lld audio latents (the audio decoder's "
      "context: %lld)\n",
      (long long)endless_video_latents(m), (long long)endless_audio_latents(m),
      (long long)m.audio_context_latents);
  const int64_t lh = 160 / 16, lw = 256 / 16;
  EXPECT_EQ(e.state_bytes,
            5 * (c.in_channels * 16 * lh * lw + 2 * endless_audio_latents(m) * c.audio_in_channels) * 4);
  const int64_t chunk_rows = 5 * (lh / 2) * (lw / 2) + 2 * 29;
  EXPECT_EQ(e.dit_rows, chunk_rows);
  EXPECT_EQ(e.kv_bytes, c.num_layers * (kTextRowsReserve + 3 * chunk_rows) * 2 * c.inner_dim() * 4);
  EXPECT_EQ(e.kv_bytes, planner_kv(m, p, 1));
  const ClipPlan clip = make_plan(m, causal(256, 160, 141, 2));
  EXPECT_EQ(e.kv_bytes, estimate_request_memory(m, clip, MemoryShape{}).kv_bytes);
  // A longer window holds more, whatever the length.
  r.window = 5;
  EXPECT_GT(estimate_request_memory(m, make_plan(m, r), MemoryShape{}).kv_bytes, e.kv_bytes);
}

// The refusal of an endless request names no length (it has none): the size that fits.
TEST(MemoryGuard, AnEndlessRefusalNamesTheSizeThatFitsAndNoLength) {
  const ModelInfo m = tiny();
  const GenerationRequest req = causal(1024, 640, kEndless, 2);
  const ClipPlan p = make_plan(m, req);
  const MemoryEstimate e = estimate_request_memory(m, p, MemoryShape{});
  const int64_t limit = e.peak() - 1;
  std::string msg;
  try {
    check_request_memory(m, req, p, MemoryShape{}, limit);
    FAIL() << "expected kOutOfMemory";
  } catch (const Error& x) {
    EXPECT_EQ(x.kind(), ErrorKind::kOutOfMemory);
    msg = x.what();
  }
  const std::string key = "at most ";
  const size_t at = msg.find(key);
  ASSERT_NE(at, std::string::npos) << msg;
  int w = 0, h = 0;
  ASSERT_EQ(std::sscanf(msg.c_str() + at + key.size(), "%dx%d", &w, &h), 2) << msg;
  // That size fits as an endless stream, the next larger step of the same aspect does not.
  EXPECT_LE(estimate_request_memory(m, make_plan(m, causal(w, h, kEndless, 2)), MemoryShape{}).peak(), limit);
  // The guard tries k/64 of the size (multiples of 16), largest first: k + 1 did not fit.
  const int64_t k = w / 16 + 1;
  ASSERT_LE(k, 63);
  const int64_t w2 = std::max(kMinSide, 1024 * k / 64 / 16 * 16),
                h2 = std::max(kMinSide, 640 * k / 64 / 16 * 16);
  EXPECT_GT(estimate_request_memory(m, make_plan(m, causal(w2, h2, kEndless, 2)), MemoryShape{}).peak(),
            limit);
  const int64_t largest = std::max({e.dit_bytes, e.decode_bytes, e.conditioning_bytes});
  const std::string term =
      largest == e.dit_bytes
          ? "the DiT's activations over " + std::to_string(e.dit_rows) + " rows: " + format_bytes(e.dit_bytes)
          : "the video decode of one clip: " + format_bytes(e.decode_bytes);
  EXPECT_EQ(msg,
            "the request (1024x640, endless) needs about " + format_bytes(e.peak()) +
                " beside the loaded weights (" + term + ", for 1 rank in this process), but " +
                format_bytes(limit) +
                " is the max-memory limit. An endless stream at 1024x640 needs this however long it runs; "
                "at most " +
                std::to_string(w) + "x" + std::to_string(h) +
                " fits. Ask for less, use more ranks on other hosts, or raise the limit with max-memory / "
                "--max-memory if the estimate is too cautious for this machine.");
  // Nothing fits: said so, still without a length.
  try {
    check_request_memory(m, req, p, MemoryShape{}, 1 << 20);
    FAIL() << "expected kOutOfMemory";
  } catch (const Error& x) {
    EXPECT_THAT(x.what(),
                HasSubstr("1.0 MiB is the max-memory limit. An endless stream at 1024x640 needs this "
                          "however long it runs; no size of this aspect fits. Ask for less"));
    EXPECT_THAT(x.what(), ::testing::Not(HasSubstr("-1")));
    EXPECT_THAT(x.what(), ::testing::Not(HasSubstr("frames")));
  }
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
  StreamControl cancel;
  engine->generate(request(64, 48, 5), sink, {}, cancel);
  EXPECT_EQ(sink.frames_so_far, 5);
  EXPECT_TRUE(sink.seen_final);
}

}  // namespace
}  // namespace h3
