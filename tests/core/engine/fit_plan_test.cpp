// The fit planner (engine/planning/fit_plan.h): the legal TP x SP layouts of N ranks, each rank's weights
// as the loader binds them (checked against what the engine actually allocates), its activations
// consistent with the memory guard's, the errors that name what to change, and `h3 plan`.
#include "engine/planning/fit_plan.h"

#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "../cli_run.h"
#include "dist/group.h"
#include "dist/world.h"
#include "dit/adaln_tables.h"
#include "dit/layers.h"
#include "dit/parameters.h"
#include "dit/sampler.h"
#include "dit/transformer.h"
#include "engine/planning/memory_guard.h"
#include "engine/planning/plan.h"
#include "h3/error.h"

namespace h3 {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr double kGB = 1e9;

std::string data_dir() {
  const char* d = std::getenv("H3_TEST_DATA");
  return d ? d : "tests/data";
}
std::string release_config() {
  return data_dir() + "/h3-release/transformer/config.json";
}
std::string golden_transformer() {
  return data_dir() + "/golden/h3_dit/transformer_tiny";
}

// The release's default request (1344x768, 124 frames, 50 grid points) for a bare config.
ClipPlan release_plan(const dit::DitConfig& c, Sampler sampler = Sampler::kEuler) {
  GenerationRequest r;
  r.sampler = sampler;
  return make_plan(model_of_config(c), r);
}

PlanOptions options(int ranks, double gib, int dtype_bytes = 2, bool tables = false) {
  PlanOptions o;
  o.ranks = ranks;
  o.device_memory = static_cast<int64_t>(gib * 1024 * 1024 * 1024);
  o.dtype_bytes = dtype_bytes;
  o.adaln_tables = tables;
  return o;
}

std::vector<std::string> names(const std::vector<LayoutFit>& layouts) {
  std::vector<std::string> out;
  for (const auto& f : layouts) out.push_back(f.name());
  return out;
}

// One of `tp` ranks' weights, counted from the declared splits (not from local_shape): split
// tensors hold 1/tp of their elements, replicated ones all of them.
int64_t shard_bytes(const dit::DitConfig& c, int tp, int bf16_bytes, bool without_adaln) {
  int64_t n = 0;
  for (const auto& s : dit::dit_parameters(c)) {
    if (without_adaln && s.adaln) continue;
    const int64_t elements = s.split == io::Split::kReplicated ? s.numel() : s.numel() / tp;
    n += elements * (s.fp32 ? 4 : bf16_bytes);
  }
  return n;
}

TEST(FitPlan, TheReleaseAtEightRanksHasFourLayoutsWithTheLoadersWeights) {
  const auto c = dit::DitConfig::load(release_config());
  const ClipPlan p = release_plan(c);
  const auto layouts = plan_layouts(c, p, options(8, 80));
  // 56 heads, FFN 14336, AdaLN 96768: every tp of 8 divides them, and 8 / tp divides 56 / tp.
  EXPECT_THAT(names(layouts), ElementsAre("TP8\u00d7SP1", "TP4\u00d7SP2", "TP2\u00d7SP4", "TP1\u00d7SP8"));
  for (const auto& f : layouts) {
    EXPECT_EQ(f.tp * f.sp, 8);
    EXPECT_EQ(f.heads_per_rank, 7) << f.name();
    EXPECT_EQ(f.weights, shard_bytes(c, f.tp, 2, false)) << f.name();
    EXPECT_EQ(f.tables, 0);
    EXPECT_EQ(f.kv_cache, 0) << "the euler sampler keeps no KV cache";
    EXPECT_EQ(f.decode, 0) << "a bare config has no VAE";
    EXPECT_EQ(f.rows_per_rank, (f.rows + f.sp - 1) / f.sp);
  }
  EXPECT_NEAR(layouts[0].weights / kGB, 8.45, 0.15);  // `h3 inspect --shapes --tp 8`: 8.445 GB
  // Fewer TP ranks: more weights per rank, fewer rows of the residual stream.
  EXPECT_LT(layouts[0].weights, layouts[1].weights);
  EXPECT_GT(layouts[0].activations, layouts[3].activations);

  // AdaLN tables of the 50-point grid in place of the projections.
  const auto tabled = plan_layouts(c, p, options(8, 80, 2, true));
  const auto grid = dit::evaluation_timesteps(dit::make_schedule(50, 12), dit::make_schedule(50, 3));
  for (size_t i = 0; i < tabled.size(); ++i) {
    EXPECT_EQ(tabled[i].weights, shard_bytes(c, tabled[i].tp, 2, true));
    EXPECT_EQ(tabled[i].tables, dit::adaln_table_bytes(c, grid, tabled[i].tp, 2));
    EXPECT_EQ(tabled[i].activations, layouts[i].activations);
  }
  EXPECT_NEAR((tabled[0].weights + tabled[0].tables) / kGB, 5.2, 0.15);
}

TEST(FitPlan, WithoutSequenceParallelismTheForwardIsTheMemoryGuardsEstimatePlusTheScoreBlock) {
  const auto c = dit::DitConfig::load(release_config());
  const ClipPlan p = release_plan(c);
  const auto f = plan_layouts(c, p, options(8, 80)).front();
  ASSERT_EQ(f.sp, 1);
  MemoryShape s;
  s.tp = 8;
  s.activation_bytes = 2;
  const MemoryEstimate e = estimate_request_memory(model_of_config(c), p, s);
  EXPECT_EQ(f.rows, e.dit_rows);
  // The blocked attention's score block: 16 queries (7 heads x 53k keys exceed 4 Mi elements),
  // fp32 scores, bf16 probabilities, the block's output.
  const int64_t block = 16;
  ASSERT_GT(7 * f.rows, dit::kDefaultScoreElements / block);
  const int64_t scores = 7 * block * f.rows * (4 + 2) + 7 * block * c.head_dim * 2;
  EXPECT_EQ(f.activations + f.attention - scores, e.dit_bytes);
  EXPECT_EQ(f.latents, e.state_bytes);
}

TEST(FitPlan, TheCausalSamplerCountsItsKvCacheAndAChunksRows) {
  const auto c = dit::DitConfig::load(release_config());
  const ClipPlan p = release_plan(c, Sampler::kCausal);
  ASSERT_EQ(p.cache_records, 4);  // the text, then sink 2 + window 2 records at most
  const auto layouts = plan_layouts(c, p, options(8, 80));
  const auto euler = plan_layouts(c, release_plan(c), options(8, 80));
  for (size_t i = 0; i < layouts.size(); ++i) {
    const auto& f = layouts[i];
    // A full chunk: 5 latents of 24 x 42 patches and 28 or 29 audio latents in two rows each.
    EXPECT_EQ(f.rows, 5 * 24 * 42 + 2 * 29) << f.name();
    const int64_t cached = kTextRowsReserve + 3 * f.rows;
    EXPECT_EQ(f.kv_cache, c.num_layers * cached * 2 * f.heads_per_rank * c.head_dim * 2) << f.name();
    EXPECT_LT(f.activations, euler[i].activations);
  }
}

TEST(FitPlan, TheWeightsFigureIsWhatTheEngineAllocates) {
  const auto c = dit::DitConfig::load(golden_transformer());
  GenerationRequest r;
  r.width = 96;
  r.height = 64;
  r.num_frames = 124;
  r.steps = 4;
  const ClipPlan p = make_plan(model_of_config(c), r);
  const auto sets = dit::evaluation_timesteps(dit::make_schedule(4, 12), dit::make_schedule(4, 3));

  // One rank: fp32 on the CPU, 4 bytes an element.
  const auto one = plan_layouts(c, p, options(1, 1, 4)).front();
  const auto one_tabled = plan_layouts(c, p, options(1, 1, 4, true)).front();
  {
    auto t = dit::Transformer::load(golden_transformer());
    EXPECT_EQ(t.resident_bytes(), one.weights);
    t.use_adaln_tables(sets, true);
    EXPECT_EQ(t.resident_bytes(), one_tabled.weights + one_tabled.tables);
  }

  // Two ranks: the tiny model's 2 heads allow TP2 x SP1 and TP1 x SP2; TP2's shards are loaded.
  const auto two = plan_layouts(c, p, options(2, 1, 4));
  const auto two_tabled = plan_layouts(c, p, options(2, 1, 4, true));
  ASSERT_THAT(names(two), ElementsAre("TP2\u00d7SP1", "TP1\u00d7SP2"));
  EXPECT_EQ(two[1].weights, one.weights) << "an SP rank holds a whole TP shard";
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> resident(2);
  const auto results = dist::run_threads(2, [&](dist::Group& g) {
    at::set_num_threads(1);
    auto t = dit::Transformer::load(golden_transformer(), &g);
    const int64_t plain = t.resident_bytes();
    t.use_adaln_tables(sets, true);
    std::lock_guard<std::mutex> lock(mu);
    resident[static_cast<size_t>(g.rank())] = {plain, t.resident_bytes()};
  });
  for (const auto& res : results) ASSERT_TRUE(res.ok) << "rank " << res.rank << ": " << res.error;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(resident[rank].first, two[0].weights) << "rank " << rank;
    EXPECT_EQ(resident[rank].second, two_tabled[0].weights + two_tabled[0].tables) << "rank " << rank;
  }
}

TEST(FitPlan, BadInputsAreRefusedNamingWhatToChange) {
  const auto c = dit::DitConfig::load(release_config());
  const ClipPlan p = release_plan(c);
  try {
    plan_layouts(c, p, options(8, 0));
    FAIL() << "a device memory of 0 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("--device-memory"));
  }
  // 16 ranks: no tp of 16 divides 56 heads with 16 / tp dividing the rest.
  try {
    plan_layouts(c, p, options(16, 80));
    FAIL() << "16 ranks were split";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("16 ranks"));
    EXPECT_THAT(e.what(), HasSubstr("56 attention heads"));
    EXPECT_THAT(e.what(), HasSubstr("that split it: 1, 2, 4, 7, 8, 14, 28, 56"));
  }
  // Outside the engine's limits the engine's own plan refuses the request.
  GenerationRequest r;
  r.num_frames = 5000;
  try {
    make_plan(model_of_config(c), r);
    FAIL() << "5000 frames were planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("frames = 5000"));
  }
}

TEST(FitPlan, TheSummaryNamesTheLayoutsThatFitOrTheMemoryThatWould) {
  const auto c = dit::DitConfig::load(release_config());
  const ClipPlan p = release_plan(c);
  const auto roomy = plan_layouts(c, p, options(8, 1000));
  EXPECT_EQ(fit_summary(roomy),
            "fits in 1000.0 GiB per rank: TP8\u00d7SP1, TP4\u00d7SP2, TP2\u00d7SP4, TP1\u00d7SP8");
  const auto tight = plan_layouts(c, p, options(8, 1));
  const std::string s = fit_summary(tight);
  EXPECT_THAT(s, HasSubstr("no layout fits in 1.00 GiB per rank; the smallest device memory that would: "));
  EXPECT_THAT(s, HasSubstr("(" + leanest(tight).name() + ")"));
  // The memory it names does fit.
  const double named = std::stod(s.substr(s.find("would: ") + 7));
  const auto enough = plan_layouts(c, p, options(8, named));
  EXPECT_TRUE(leanest(enough).fits());
  EXPECT_FALSE(leanest(plan_layouts(c, p, options(8, named - 0.1))).fits());
}

test::CliRun h3_plan(const std::string& args) {
  return test::run_h3("plan " + args);
}

TEST(FitPlanCli, PlansTheReleaseConfigAtEightRanks) {
  const test::CliRun r = h3_plan("--config '" + release_config() +
                                 "' --ranks 8 --device-memory 80 --width 1344 --height 768 --frames 124");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* layout : {"TP8\u00d7SP1", "TP4\u00d7SP2", "TP2\u00d7SP4", "TP1\u00d7SP8"}) {
    EXPECT_THAT(r.output, HasSubstr(std::string("\n") + layout)) << layout;
  }
  EXPECT_THAT(r.output, HasSubstr("\nfits in 80.0 GiB per rank: TP8\u00d7SP1"));
  EXPECT_THAT(r.output, HasSubstr("the video decode (--config gives a transformer config only"));

  // A model folder: the video decode is counted.
  const test::CliRun folder = h3_plan("--model '" + data_dir() + "/h3-release' --ranks 8 --device-memory 80");
  ASSERT_EQ(folder.code, 0) << folder.output;
  EXPECT_THAT(folder.output, ::testing::Not(HasSubstr("the video decode (--config")));

  // Too little memory: exit code 1 and the memory that would do.
  const test::CliRun tight = h3_plan("--config '" + release_config() + "' --ranks 8 --device-memory 4");
  EXPECT_EQ(tight.code, 1) << tight.output;
  EXPECT_THAT(tight.output,
              HasSubstr("no layout fits in 4.00 GiB per rank; the smallest device memory that would"));
}

TEST(FitPlanCli, RefusesWhatTheEngineWouldRefuse) {
  const std::string config = "--config '" + release_config() + "'";
  const test::CliRun frames = h3_plan(config + " --ranks 8 --device-memory 80 --frames 5000");
  EXPECT_EQ(frames.code, 1);
  EXPECT_THAT(frames.output, HasSubstr("frames = 5000: must be within 1..1024"));
  const test::CliRun width = h3_plan(config + " --ranks 8 --device-memory 80 --width 8192");
  EXPECT_EQ(width.code, 1);
  EXPECT_THAT(width.output, HasSubstr("width = 8192: must be within 16..4096"));
  const test::CliRun ranks = h3_plan(config + " --ranks 16 --device-memory 80");
  EXPECT_EQ(ranks.code, 1);
  EXPECT_THAT(ranks.output, HasSubstr("16 ranks splits this model"));
  const test::CliRun memory = h3_plan(config + " --ranks 8 --device-memory 0");
  EXPECT_EQ(memory.code, 1);
  EXPECT_THAT(memory.output, HasSubstr("--device-memory 0"));
}

}  // namespace
}  // namespace h3
