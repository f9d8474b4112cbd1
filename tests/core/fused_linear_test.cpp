// The fused linears (common/fused_linear.h) and the tasks they run in (common/parallel_tasks.h):
// every post-op against at::linear in fp64 over tiles of every kind, the same bits at any
// intra-op thread count on the DiT's shapes, the tiles as a function of the shape alone, and the
// caller's thread count left as it was.
#include "common/fused_linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/parallel_tasks.h"

namespace h3 {
namespace {

struct ThreadCount {
  int saved = at::get_num_threads();
  ~ThreadCount() { at::set_num_threads(saved); }
};

class FusedLinear : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!onednn_linear(at::ones({1, 1}), at::ones({1, 1})))
      GTEST_SKIP() << "this LibTorch has no oneDNN linear operators: the linears are at::linear";
  }
};

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// The four operations on x [.., K], w [N, K], b [N], other [.., N].
std::vector<at::Tensor> all_four(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                                 const at::Tensor& other) {
  return {h3::linear(x, w, b), h3::linear_silu(x, w, b), h3::linear_mul(x, w, b, other),
          h3::linear_add(x, w, b, other)};
}

TEST_F(FusedLinear, EveryPostOpMatchesAtLinearOverTilesOfEveryKind) {
  at::manual_seed(11);
  const struct {
    std::vector<int64_t> lead;
    int64_t k, n;
    bool bias;
  } cases[] = {
      {{3}, 4096, 9216, true},     // a few AdaLN rows: 2 column tiles
      {{1500}, 128, 768, false},   // 3 row tiles, the last shorter
      {{2, 600}, 384, 256, true},  // a 3-D input, 2 row tiles
      {{64}, 512, 3072, true},     // prompt rows: 2 column tiles
      {{600}, 2048, 1024, false},  // 2 row tiles x 4 column tiles
      {{5}, 16, 8, false},         // one tile
      {{20}, 4096, 1000, true},    // 2 column tiles, the last narrower
  };
  for (const auto& c : cases) {
    std::vector<int64_t> xs = c.lead, os = c.lead;
    xs.push_back(c.k);
    os.push_back(c.n);
    int64_t rows = 1;
    for (int64_t d : c.lead) rows *= d;
    const LinearTiles t = linear_tiles(rows, c.k, c.n);
    SCOPED_TRACE(::testing::Message() << rows << " x " << c.k << " -> " << c.n << ": " << t.row_tiles << " x "
                                      << t.col_tiles << " tiles");
    const at::Tensor x = at::randn(xs, at::kDouble), w = at::randn({c.n, c.k}, at::kDouble);
    const at::Tensor b = c.bias ? at::randn({c.n}, at::kDouble) : at::Tensor();
    const at::Tensor other = at::randn(os, at::kDouble);
    const at::Tensor ref = at::linear(x, w, b.defined() ? std::optional<at::Tensor>(b) : std::nullopt);
    const std::vector<at::Tensor> want = {ref, at::silu(ref), ref * other, ref + other};
    const std::vector<at::Tensor> got = all_four(x.to(at::kFloat), w.to(at::kFloat),
                                                 b.defined() ? b.to(at::kFloat) : b, other.to(at::kFloat));
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].sizes(), want[i].sizes()) << "operation " << i;
      EXPECT_LE(max_abs_diff(got[i], want[i]), 2e-4 * std::sqrt(static_cast<double>(c.k)))
          << "operation " << i;
    }
  }
}

// The DiT's GEMMs (the default model: hidden 128, 2 heads x 128, SwiGLU 384, over the rows of a
// 256x160 clip's 5-latent-frame chunk and of a whole 121-frame clip; the medium benchmark model:
// hidden 512, 4 x 128 heads, SwiGLU 1536, 2826 rows; a rank-4 LoRA's down and up projections;
// three timesteps' AdaLN rows) give the same bits at 1, 2, 3 and 4 intra-op threads. oneDNN splits
// such GEMMs differently at 3 or 4 threads on AVX2 (meson test core_common_avx2 runs this with
// oneDNN and MKL held to AVX2 on any x86 machine).
TEST_F(FusedLinear, GivesTheSameBitsAtAnyThreadCount) {
  ThreadCount restore;
  at::manual_seed(12);
  const struct {
    int64_t rows, k, n;
  } shapes[] = {{264, 128, 256},  {264, 256, 128},   {264, 128, 768},   {264, 384, 128},   {1600, 128, 256},
                {1600, 384, 128}, {2826, 512, 1536}, {2826, 1536, 512}, {2826, 512, 3072}, {2826, 512, 4},
                {2826, 4, 512},   {3, 128, 2304},    {64, 512, 512},    {300, 256, 300}};
  for (const auto& s : shapes) {
    const at::Tensor x = at::randn({s.rows, s.k}), w = at::randn({s.n, s.k}), b = at::randn({s.n});
    const at::Tensor other = at::randn({s.rows, s.n});
    at::set_num_threads(1);
    const std::vector<at::Tensor> one = all_four(x, w, b, other);
    for (int threads : {2, 3, 4}) {
      at::set_num_threads(threads);
      const std::vector<at::Tensor> got = all_four(x, w, b, other);
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(at::equal(got[i], one[i]))
            << s.rows << " x " << s.k << " -> " << s.n << ", operation " << i << ", " << threads
            << " threads: max |diff| " << max_abs_diff(got[i], one[i]);
      }
    }
  }
}

// The tasks run with one thread each, on the pool's threads or, for a single tile, on the caller's;
// either way the caller's count is what it was.
TEST_F(FusedLinear, LeavesTheCallersThreadCountAsItWas) {
  ThreadCount restore;
  at::set_num_threads(3);
  (void)h3::linear(at::randn({100, 64}), at::randn({64, 64}), {});  // one tile
  EXPECT_EQ(at::get_num_threads(), 3);
  (void)h3::linear(at::randn({2826, 512}), at::randn({1536, 512}), {});  // 33 tiles
  EXPECT_EQ(at::get_num_threads(), 3);
}

TEST(LinearTiles, FollowTheShapeAlone) {
  const auto tiles = [](int64_t rows, int64_t in, int64_t out) {
    const LinearTiles t = linear_tiles(rows, in, out);
    return std::vector<int64_t>{t.rows_per_tile, t.row_tiles, t.cols_per_tile, t.col_tiles};
  };
  // 2.2 G multiply-adds: 34 tiles wanted; more rows than outputs: 11 row tiles (no fewer than 256
  // rows each) of 272 rows, the last 106, then the 34 / 11 = 3 column tiles of 512 columns.
  EXPECT_EQ(tiles(2826, 512, 1536), (std::vector<int64_t>{272, 11, 512, 3}));
  // TP 2's q projection of the bench model (590 M): 9 row tiles of 512 rows.
  EXPECT_EQ(tiles(4506, 512, 256), (std::vector<int64_t>{512, 9, 256, 1}));
  // Under 67 M multiply-adds: one tile.
  EXPECT_EQ(tiles(200, 512, 128), (std::vector<int64_t>{200, 1, 128, 1}));
  EXPECT_EQ(tiles(3, 128, 2304), (std::vector<int64_t>{3, 1, 2304, 1}));
  // More outputs than rows: columns first. Three AdaLN rows at the release's width (472 M): 8
  // column tiles; 64 prompt rows of 512 -> 3072 (100 M): 2.
  EXPECT_EQ(tiles(3, 5120, 30720), (std::vector<int64_t>{3, 1, 3840, 8}));
  EXPECT_EQ(tiles(64, 512, 3072), (std::vector<int64_t>{64, 1, 1536, 2}));
  // 2.1 G, 32 tiles wanted: the larger dimension in the more tiles, either way round.
  EXPECT_EQ(tiles(1024, 512, 4096), (std::vector<int64_t>{512, 2, 256, 16}));
  EXPECT_EQ(tiles(4096, 512, 1024), (std::vector<int64_t>{256, 16, 512, 2}));
  // Both split (8.6 G, 64 tiles): 8 column tiles of 256, then 64 / 8 = 8 row tiles wanted, of
  // which 1024 rows allow 4.
  EXPECT_EQ(tiles(1024, 4096, 2048), (std::vector<int64_t>{256, 4, 256, 8}));
  EXPECT_EQ(tiles(1, 1, 1), (std::vector<int64_t>{1, 1, 1, 1}));
}

TEST(RunTasks, RunsEachTaskOnceWithOneThreadInsideAndRethrowsTheFirstError) {
  ThreadCount restore;
  for (int threads : {1, 2, 4}) {
    at::set_num_threads(threads);
    std::vector<std::atomic<int>> runs(100);
    std::atomic<int> inside_threads_max{0};
    run_tasks(100, [&](int64_t i) {
      ++runs[static_cast<size_t>(i)];
      int seen = at::get_num_threads(), was = inside_threads_max.load();
      while (seen > was && !inside_threads_max.compare_exchange_weak(was, seen)) {
      }
    });
    for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].load(), 1) << "task " << i << ", " << threads;
    EXPECT_EQ(inside_threads_max.load(), 1) << threads << " threads: a task saw more than one thread";
    EXPECT_EQ(at::get_num_threads(), threads);
    try {
      run_tasks(10, [](int64_t i) {
        if (i == 7) throw std::runtime_error("task 7 failed");
      });
      ADD_FAILURE() << "a task's error was lost";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "task 7 failed");
    }
    EXPECT_EQ(at::get_num_threads(), threads);
  }
}

}  // namespace
}  // namespace h3
