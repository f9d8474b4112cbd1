// Tensor parallelism: ranks as threads of one process (dist::run_threads, Gloo). Every rank
// must get the reference velocities, hold only its shards, and reject a tp that cannot split
// the model. Tolerance between TP sizes: 2e-5 absolute on velocities of order 1 (fp32 sums in
// a different order: the row-parallel partial products are summed across ranks).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <memory>
#include <mutex>

#include "../../temp_dir.h"
#include "dist/group.h"
#include "dist/world.h"
#include "dit/random_model.h"
#include "dit/sampler.h"
#include "dit/transformer.h"
#include "dit_test_util.h"
#include "h3/error.h"
#include "io/shard_plan.h"

namespace h3::dit {
namespace {

using testing::golden_dir;
using testing::max_abs_diff;
using testing::read_tensors;

constexpr double kTpTolerance = 2e-5;

DitInputs case_inputs(const std::string& name) {
  return testing::case_inputs(read_tensors(golden_dir() + "/case_" + name + ".safetensors"));
}

// Runs `fn` on `n` ranks and returns each rank's velocity; fails the test for a failed rank.
std::vector<Velocity> on_ranks(int n, const std::function<Velocity(dist::Group&)>& fn) {
  std::vector<Velocity> out(static_cast<size_t>(n));
  auto results = dist::run_threads(n, [&](dist::Group& g) {
    at::set_num_threads(1);
    out[static_cast<size_t>(g.rank())] = fn(g);
  });
  for (const auto& r : results) EXPECT_TRUE(r.ok) << "rank " << r.rank << ": " << r.error;
  return out;
}

TEST(DitTp, GoldenCasesAtTp2FromBothLayouts) {
  struct Run {
    const char* name;
    const char* dir;
  };
  for (const Run& run :
       {Run{"tiny_t2_h4w6_L5", "/transformer_tiny"}, Run{"tiny_t7_h6w8_L17", "/transformer_tiny"},
        Run{"tiny_t7_h6w8_L17", "/transformer_tiny_native"}}) {
    auto expected = read_tensors(golden_dir() + "/case_" + run.name + ".safetensors");
    const auto in = case_inputs(run.name);
    auto v = on_ranks(
        2, [&](dist::Group& g) { return Transformer::load(golden_dir() + run.dir, &g).forward(in); });
    for (int r = 0; r < 2; ++r) {
      const double ev = max_abs_diff(v[r].video, expected.at("velocity_video"));
      const double ea = max_abs_diff(v[r].audio, expected.at("velocity_audio"));
      std::printf("TP2 %s%s rank %d: max |dv_video| = %.3g, max |dv_audio| = %.3g\n", run.name, run.dir, r,
                  ev, ea);
      EXPECT_LE(ev, 1e-4);
      EXPECT_LE(ea, 1e-4);
    }
    // The all-reduce leaves every rank with the same numbers.
    EXPECT_TRUE(at::equal(v[0].video, v[1].video));
    EXPECT_TRUE(at::equal(v[0].audio, v[1].audio));
  }
}

TEST(DitTp, GoldenSamplingRunAtTp2) {
  auto e = read_tensors(golden_dir() + "/gen_tiny_124f_96x64_n4.expected.safetensors");
  auto embeds = read_tensors(golden_dir() + "/gen_tiny_124f_96x64_n4.embeds.safetensors").at("embeds");
  auto v = on_ranks(2, [&](dist::Group& g) {
    auto model = Transformer::load(golden_dir() + "/transformer_tiny", &g);
    DenoiseRequest r;
    r.text = embeds;
    r.noise = draw_noise(42, {1, 24, 37, 4, 6}, {414, 32});
    r.video = make_schedule(4, kVideoShift);
    r.audio = make_schedule(4, kAudioShift);
    auto x = denoise(model, r);
    return Velocity{x.video, x.audio};
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_LE(max_abs_diff(v[r].video, e.at("video")), 1e-4);
    EXPECT_LE(max_abs_diff(v[r].audio, e.at("audio")), 1e-4);
  }
  // Every rank ends the run with the very same latents (the next step's input on each).
  EXPECT_TRUE(at::equal(v[1].video, v[0].video));
  EXPECT_TRUE(at::equal(v[1].audio, v[0].audio));
}

// A 4-head random model (the golden one has 2 heads), so that TP 4 splits it.
class FourHeads : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<test::TempDir>("dit-tp");
    DitConfig c;
    c.hidden_size = 64;
    c.num_layers = 2;
    c.num_refiner_layers = 2;
    c.num_heads = 4;
    c.head_dim = 32;
    c.rope_freq_dim = 4;  // 24 rotated dims of 32
    c.ffn_dim = 128;
    c.text_dim = 48;
    c.time_embed_hidden_dim = 64;
    c.time_embed_dim = 32;
    write_random_transformer(dir(), c, 7);
  }
  static void TearDownTestSuite() { dir_.reset(); }
  // The suite's random transformer, written once for all its tests.
  static const std::string& dir() { return dir_->str(); }
  static DitInputs inputs() {
    DitInputs in;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
    in.text = at::randn({6, 48}, gen);
    in.video = at::randn({1, 24, 7, 4, 6}, gen);
    in.audio = at::randn({2 * 37, 32}, gen);
    in.t_video = 0.6f;
    in.t_audio = 0.3f;
    return in;
  }
  static std::unique_ptr<test::TempDir> dir_;
};
std::unique_ptr<test::TempDir> FourHeads::dir_;

TEST_F(FourHeads, Tp2AndTp4MatchTp1) {
  const auto in = inputs();
  const auto ref = Transformer::load(dir()).forward(in);
  ASSERT_GT(ref.video.abs().max().item<double>(), 0.1);
  for (int tp : {2, 4}) {
    auto v = on_ranks(tp, [&](dist::Group& g) { return Transformer::load(dir(), &g).forward(in); });
    for (int r = 0; r < tp; ++r) {
      const double ev = max_abs_diff(v[r].video, ref.video), ea = max_abs_diff(v[r].audio, ref.audio);
      std::printf("TP%d rank %d vs TP1: max |dv_video| = %.3g, max |dv_audio| = %.3g\n", tp, r, ev, ea);
      EXPECT_LE(ev, kTpTolerance);
      EXPECT_LE(ea, kTpTolerance);
      EXPECT_TRUE(at::equal(v[r].video, v[0].video)) << "TP" << tp << " rank " << r;
      EXPECT_TRUE(at::equal(v[r].audio, v[0].audio)) << "TP" << tp << " rank " << r;
    }
  }
}

TEST_F(FourHeads, EachRankHoldsOnlyItsOwnedShards) {
  const auto whole = Transformer::load(dir());
  std::map<std::string, at::Tensor> full;
  for (const auto& [n, t] : whole.weights().named()) full[n] = t;
  // Each tensor's split as docs/h3-model.md §10.4 gives it, written here independently of the
  // declaration the loader follows.
  const auto split_of = [](const std::string& n) {
    const auto has = [&](const char* part) { return n.find(part) != std::string::npos; };
    if (has(".attn.to_q.") || has(".attn.to_k.") || has(".attn.to_v.") || has(".adaln_proj.linear."))
      return io::Split::kColumn;
    if (has(".ff.net.0.proj.")) return io::Split::kFusedColumn;
    if (has(".attn.to_out.0.weight") || has(".ff.net.2.weight")) return io::Split::kRow;
    return io::Split::kReplicated;
  };
  const int tp = 4;
  std::mutex mu;
  std::vector<int64_t> rank_bytes(tp, 0);
  auto results = dist::run_threads(tp, [&](dist::Group& g) {
    auto model = Transformer::load(dir(), &g);
    int64_t bytes = 0;
    for (const auto& [n, t] : model.weights().named()) {
      bytes += static_cast<int64_t>(t.nbytes());
      // Storage of its own: no view keeping the whole source tensor alive.
      if (t.storage().nbytes() != t.nbytes()) throw std::runtime_error(n + " does not own its storage");
      const auto& f = full.at(n);
      at::Tensor want;
      switch (split_of(n)) {
        case io::Split::kReplicated: want = f; break;
        case io::Split::kColumn: want = f.chunk(tp, 0)[g.rank()]; break;
        case io::Split::kRow: want = f.chunk(tp, 1)[g.rank()]; break;
        case io::Split::kFusedColumn: {
          auto halves = f.chunk(2, 0);
          want = at::cat({halves[0].chunk(tp, 0)[g.rank()], halves[1].chunk(tp, 0)[g.rank()]}, 0);
          break;
        }
      }
      if (!at::equal(t, want)) throw std::runtime_error(n + " is not this rank's shard");
    }
    std::lock_guard<std::mutex> lock(mu);
    rank_bytes[static_cast<size_t>(g.rank())] = bytes;
  });
  for (const auto& r : results) EXPECT_TRUE(r.ok) << "rank " << r.rank << ": " << r.error;
  // Shard bytes add up to the whole once, replicated bytes once per rank.
  int64_t split = 0, replicated = 0;
  for (const auto& [n, t] : full) (split_of(n) == io::Split::kReplicated ? replicated : split) += t.nbytes();
  int64_t total = 0;
  for (int64_t b : rank_bytes) {
    EXPECT_EQ(b, split / tp + replicated);
    total += b;
  }
  EXPECT_EQ(total, split + tp * replicated);
  const auto& b0 = whole.weights().blocks[0];
  EXPECT_EQ(b0.to_q.size(0), 4 * 32);  // TP1 holds every head
}

TEST_F(FourHeads, TpThatDoesNotDivideTheHeadsFailsOnEveryRank) {
  auto results = dist::run_threads(3, [&](dist::Group& g) { Transformer::load(dir(), &g); });
  ASSERT_EQ(results.size(), 3u);
  for (const auto& r : results) {
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("attention heads"), std::string::npos) << r.error;
    try {
      std::rethrow_exception(r.exception);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    } catch (...) {
      ADD_FAILURE() << "not an h3::Error";
    }
  }
}

}  // namespace
}  // namespace h3::dit
