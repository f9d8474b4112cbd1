// Ulysses sequence parallelism beside tensor parallelism (dit/tp.h): a 12-head random model
// (so that SP 2, SP 3, TP 2 x SP 2 and TP 2 x SP 3 all split it) gives every rank the velocities of
// one rank within 1e-5 (fp32 sums in another order), row counts that no degree divides
// included; the chunk-causal sampler likewise; layouts that cannot split the model are refused
// naming the values. Ranks are threads (dist::run_threads, shared memory and Gloo).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <memory>

#include "../../temp_dir.h"
#include "dist/group.h"
#include "dist/world.h"
#include "dit/consistency_sampler.h"
#include "dit/random_model.h"
#include "dit/transformer.h"
#include "dit_test_util.h"
#include "h3/error.h"

namespace h3::dit {
namespace {

using testing::max_abs_diff;

constexpr double kTolerance = 1e-5;

struct Layout {
  int tp, sp;
  int ranks() const { return tp * sp; }
  std::string name() const { return "tp " + std::to_string(tp) + " x sp " + std::to_string(sp); }
};

class TwelveHeads : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<test::TempDir>("dit-sp");
    DitConfig c;
    c.hidden_size = 96;
    c.num_layers = 2;
    c.num_refiner_layers = 1;
    c.num_heads = 12;
    c.head_dim = 16;
    c.rope_freq_dim = 2;  // 12 rotated dims of 16
    c.ffn_dim = 192;
    c.text_dim = 40;
    c.time_embed_hidden_dim = 64;
    c.time_embed_dim = 32;
    write_random_transformer(dir(), c, 11);
  }
  static void TearDownTestSuite() { dir_.reset(); }
  // The suite's random transformer, written once for all its tests.
  static const std::string& dir() { return dir_->str(); }
  // 7 (or 8) text + 2 x 19 audio + 2 x 2 x 3 video rows = 57 (58): SP 2 and 4 split 57 unevenly, SP 3 58.
  static DitInputs inputs(int64_t text_rows = 7) {
    DitInputs in;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    in.text = at::randn({text_rows, 40}, gen);
    in.video = at::randn({1, 24, 2, 4, 6}, gen);
    in.audio = at::randn({2 * 19, 32}, gen);
    in.t_video = 0.4f;
    in.t_audio = 0.7f;
    return in;
  }
  static TransformerOptions with_sp(int sp) {
    TransformerOptions o;
    o.sp = sp;
    return o;
  }
  static std::unique_ptr<test::TempDir> dir_;
};
std::unique_ptr<test::TempDir> TwelveHeads::dir_;

// Runs fn on the layout's ranks (thread ranks over `transport`); returns each rank's result.
template <typename T>
std::vector<T> on_layout(const Layout& l, const std::function<T(dist::Group&)>& fn,
                         dist::ThreadTransport transport = dist::ThreadTransport::kSharedMemory) {
  std::vector<T> out(static_cast<size_t>(l.ranks()));
  dist::WorldOptions o;
  o.thread_transport = transport;
  auto results = dist::run_threads(
      l.ranks(),
      [&](dist::Group& g) {
        at::set_num_threads(1);
        out[static_cast<size_t>(g.rank())] = fn(g);
      },
      o);
  for (const auto& r : results) EXPECT_TRUE(r.ok) << l.name() << " rank " << r.rank << ": " << r.error;
  return out;
}

TEST_F(TwelveHeads, EveryLayoutGivesEveryRankTheVelocitiesOfOneRank) {
  for (int64_t text_rows : {7, 8}) {  // 57 and 58 rows
    const auto in = inputs(text_rows);
    const auto ref = Transformer::load(dir()).forward(in);
    ASSERT_GT(ref.video.abs().max().item<double>(), 0.1);
    for (const Layout& l : {Layout{1, 2}, Layout{1, 3}, Layout{2, 2}, Layout{2, 3}, Layout{1, 4}}) {
      auto v = on_layout<Velocity>(l, [&](dist::Group& g) {
        auto m = Transformer::load(dir(), &g, with_sp(l.sp));
        EXPECT_EQ(m.tp_size(), l.tp);
        EXPECT_EQ(m.sp_size(), l.sp);
        return m.forward(in);
      });
      for (int r = 0; r < l.ranks(); ++r) {
        const double ev = max_abs_diff(v[r].video, ref.video), ea = max_abs_diff(v[r].audio, ref.audio);
        std::printf("%s, %lld rows, rank %d vs 1 rank: max |dv_video| = %.3g, max |dv_audio| = %.3g\n",
                    l.name().c_str(), static_cast<long long>(text_rows + 38 + 12), r, ev, ea);
        EXPECT_LE(ev, kTolerance) << l.name() << " rank " << r;
        EXPECT_LE(ea, kTolerance) << l.name() << " rank " << r;
        EXPECT_TRUE(at::equal(v[r].video, v[0].video)) << l.name() << ": ranks differ";
      }
    }
  }
}

TEST_F(TwelveHeads, UlyssesOverGlooLikeProcessRanks) {
  const auto in = inputs();
  const auto ref = Transformer::load(dir()).forward(in);
  const Layout l{2, 2};
  auto v = on_layout<Velocity>(
      l, [&](dist::Group& g) { return Transformer::load(dir(), &g, with_sp(l.sp)).forward(in); },
      dist::ThreadTransport::kGloo);
  for (int r = 0; r < l.ranks(); ++r) EXPECT_LE(max_abs_diff(v[r].video, ref.video), kTolerance) << r;
}

TEST_F(TwelveHeads, TheCausalSamplerUnderSequenceParallelism) {
  CausalRequest req;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  req.text = at::randn({5, 40}, gen);
  req.seed = 3;
  req.video_latents = 12;  // 5k + 2: two chunks
  req.latent_h = 4;
  req.latent_w = 4;
  req.audio_latents = 65;  // as the reference cases pair them with 12 video latents
  req.settings.steps = 2;
  auto run = [&](const Transformer& m) { return testing::causal_outputs(m, req); };
  const auto ref = run(Transformer::load(dir()));
  for (const Layout& l : {Layout{1, 2}, Layout{2, 2}, Layout{1, 3}}) {
    auto got = on_layout<std::vector<at::Tensor>>(
        l, [&](dist::Group& g) { return run(Transformer::load(dir(), &g, with_sp(l.sp))); });
    for (int r = 0; r < l.ranks(); ++r) {
      ASSERT_EQ(got[r].size(), ref.size()) << l.name();
      for (size_t i = 0; i < ref.size(); ++i) {
        EXPECT_LE(max_abs_diff(got[r][i], ref[i]), kTolerance)
            << l.name() << " rank " << r << " output " << i;
      }
    }
  }
}

TEST_F(TwelveHeads, LayoutsThatCannotSplitTheModelAreRefusedNamingTheValues) {
  struct Bad {
    Layout l;
    std::string words;
  };
  // 12 heads: tp 4 leaves 3 per rank, which sp 2 cannot split; sp 5 does not divide 10 ranks...
  for (const Bad& b : {Bad{{4, 2}, "sp must divide the 3 heads each TP rank holds (12 heads / tp 4)"},
                       Bad{{1, 5}, "sp must divide the 12 heads each TP rank holds"}}) {
    auto results = dist::run_threads(b.l.ranks(),
                                     [&](dist::Group& g) { Transformer::load(dir(), &g, with_sp(b.l.sp)); });
    for (const auto& r : results) {
      ASSERT_FALSE(r.ok) << b.l.name();
      EXPECT_NE(r.error.find(b.words), std::string::npos) << r.error;
    }
  }
  try {
    check_layout(Transformer::load(dir()).config(), 4, 3);
    ADD_FAILURE() << "sp 3 on 4 ranks";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("sp 3 on 4 ranks: sp must divide the ranks"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace h3::dit
