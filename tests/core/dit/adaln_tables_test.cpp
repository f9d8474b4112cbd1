// AdaLN tables (dit/adaln_tables.h): a forward that reads them is bit for bit one that computes
// the rows on the fly (the golden sampling run at 1 and 2 ranks, a causal case with its LoRA,
// which adapts the time MLP), the projections leave memory (bytes counted), LoRAs attach and
// detach after they left, a new grid reads them again from the checkpoint, and a grid the tables
// lack is refused naming its timesteps when there is no checkpoint to read.
#include "dit/adaln_tables.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "dist/world.h"
#include "dit/consistency_sampler.h"
#include "dit/parameters.h"
#include "dit/sampler.h"
#include "dit/transformer.h"
#include "dit_test_util.h"
#include "h3/error.h"

namespace h3::dit {
namespace {

using testing::data_dir;
using testing::golden_dir;
using testing::read_tensors;

std::string tiny_dir() {
  return golden_dir() + "/transformer_tiny";
}
std::string lora_dir() {
  return data_dir() + "/causal/lora";
}

DenoiseRequest golden_request(int64_t grid_points = 4) {
  DenoiseRequest r;
  r.text = read_tensors(golden_dir() + "/gen_tiny_124f_96x64_n4.embeds.safetensors").at("embeds");
  r.noise = draw_noise(42, {1, 24, 37, 4, 6}, {414, 32});
  r.video = make_schedule(grid_points, kVideoShift);
  r.audio = make_schedule(grid_points, kAudioShift);
  return r;
}

// Bytes of the AdaLN projections `w` holds (this rank's shards).
int64_t projection_bytes(const DitWeights& w) {
  int64_t n = 0;
  for (const auto& b : w.blocks) n += static_cast<int64_t>(b.adaln.weight.nbytes() + b.adaln.bias.nbytes());
  return n + static_cast<int64_t>(w.norm_out_linear.weight.nbytes() + w.norm_out_linear.bias.nbytes());
}

void expect_same(const Latents& a, const Latents& b, const std::string& what) {
  EXPECT_TRUE(at::equal(a.video, b.video)) << what << ": video differs";
  EXPECT_TRUE(at::equal(a.audio, b.audio)) << what << ": audio differs";
}

TEST(AdalnTables, GoldenRunIsBitForBitWithTheProjectionsDropped) {
  const auto r = golden_request();
  const auto on_the_fly = Transformer::load(tiny_dir());
  auto tabled = Transformer::load(tiny_dir());
  const int64_t before = tabled.resident_bytes(), projections = projection_bytes(tabled.weights());
  ASSERT_GT(projections, 0);
  const auto sets = evaluation_timesteps(r.video, r.audio);
  ASSERT_EQ(sets.size(), 3u);  // 4 grid points: 3 evaluations, each {t_video, t_audio}
  tabled.use_adaln_tables(sets, /*drop_projections=*/true);
  EXPECT_FALSE(tabled.adaln_resident());
  for (const auto& b : tabled.weights().blocks) EXPECT_FALSE(b.adaln.weight.defined());
  ASSERT_NE(tabled.adaln_tables(), nullptr);
  EXPECT_EQ(tabled.adaln_tables()->size(), 3u);
  // What left and what came: the tables are the rows of 3 evaluations x 2 timesteps.
  const auto& c = tabled.config();
  const int64_t table_bytes = tabled.adaln_tables()->bytes();
  EXPECT_EQ(table_bytes, adaln_table_bytes(c, sets, 1, 4));
  EXPECT_EQ(tabled.resident_bytes(), before - projections + table_bytes);
  std::printf("tiny DiT: %lld bytes resident, %lld with tables (projections %lld, tables %lld)\n",
              static_cast<long long>(before), static_cast<long long>(tabled.resident_bytes()),
              static_cast<long long>(projections), static_cast<long long>(table_bytes));

  const auto want = denoise(on_the_fly, r);
  expect_same(denoise(tabled, r), want, "1 rank");
  // The golden run itself (the same numbers as on the fly, so within its tolerance).
  const auto e = read_tensors(golden_dir() + "/gen_tiny_124f_96x64_n4.expected.safetensors");
  EXPECT_LE(testing::max_abs_diff(want.video, e.at("video")), 1e-4);
}

TEST(AdalnTables, TwoRanksAreBitForBitWithTheProjectionsDropped) {
  const auto r = golden_request();
  std::vector<Latents> fly(2), tab(2);
  std::vector<int64_t> dropped(2);
  auto results = dist::run_threads(2, [&](dist::Group& g) {
    at::set_num_threads(1);
    const size_t i = static_cast<size_t>(g.rank());
    auto a = Transformer::load(tiny_dir(), &g);
    fly[i] = denoise(a, r);
    auto b = Transformer::load(tiny_dir(), &g);
    const int64_t before = b.resident_bytes();
    b.use_adaln_tables(evaluation_timesteps(r.video, r.audio), true);
    dropped[i] = before - b.resident_bytes();
    tab[i] = denoise(b, r);
  });
  for (const auto& res : results) ASSERT_TRUE(res.ok) << "rank " << res.rank << ": " << res.error;
  for (size_t i = 0; i < 2; ++i) {
    expect_same(tab[i], fly[i], "rank " + std::to_string(i) + " of 2");
    EXPECT_GT(dropped[i], 0) << "rank " << i;
  }
  expect_same(tab[0], tab[1], "rank 0 against rank 1");
}

TEST(AdalnTables, CausalSamplerWithItsLoraIsBitForBit) {
  // The causal case's LoRA adapts the time MLP and the AdaLN projections: the tables are
  // computed after it is attached, its AdaLN deltas added at use.
  const auto spec = nlohmann::json::parse(std::ifstream(data_dir() + "/causal/cases.json"));
  const auto t = read_tensors(data_dir() + "/causal/case_k2_sink2_window2.safetensors");
  const nlohmann::json* cs = nullptr;
  for (const auto& c : spec["cases"])
    if (c["name"] == "k2_sink2_window2") cs = &c;
  ASSERT_NE(cs, nullptr);
  CausalRequest r;
  r.text = t.at("text").select(0, 0);
  r.seed = (*cs)["sampler"]["seed"].get<uint64_t>();
  r.video_latents = (*cs)["layout"]["latent_t"].get<int64_t>();
  r.latent_h = (*cs)["layout"]["latent_h"].get<int64_t>();
  r.latent_w = (*cs)["layout"]["latent_w"].get<int64_t>();
  r.audio_latents = (*cs)["layout"]["audio_t"].get<int64_t>();
  auto run = [&](const Transformer& m) { return testing::causal_outputs(m, r); };
  auto fly = Transformer::load(tiny_dir());
  fly.attach_lora(lora_dir());
  auto tab = Transformer::load(tiny_dir());
  tab.attach_lora(lora_dir());
  const auto sets = causal_timesteps(r.settings);
  ASSERT_EQ(sets.size(), 5u);  // the clean 0.999 and 4 steps
  tab.use_adaln_tables(sets, true);
  const auto a = run(fly), b = run(tab);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << "output " << i;
}

TEST(AdalnTables, LorasAttachAndDetachAfterTheProjectionsLeft) {
  const auto dense = read_tensors(data_dir() + "/causal/dense_lora.safetensors");
  const auto in = testing::case_inputs(dense);
  const std::vector<TimestepSet> sets{timestep_set(in.t_video, in.t_audio)};
  auto fly = Transformer::load(tiny_dir());
  auto tab = Transformer::load(tiny_dir());
  tab.use_adaln_tables(sets, true);
  const auto base = fly.forward(in);
  auto same = [](const Velocity& x, const Velocity& y) {
    return at::equal(x.video, y.video) && at::equal(x.audio, y.audio);
  };
  EXPECT_TRUE(same(tab.forward(in), base));
  // Its time-MLP adapter changes the embedding the tables were computed from: they are computed
  // again, the projections read again from the checkpoint and dropped again.
  fly.attach_lora(lora_dir());
  tab.attach_lora(lora_dir());
  EXPECT_FALSE(tab.adaln_resident());
  const auto adapted = fly.forward(in);
  EXPECT_TRUE(same(tab.forward(in), adapted));
  EXPECT_GT(testing::max_abs_diff(adapted.video, base.video), 0.1);  // the adapter matters
  fly.detach_lora();
  tab.detach_lora();
  EXPECT_FALSE(tab.adaln_resident());
  EXPECT_TRUE(same(tab.forward(in), base));
}

TEST(AdalnTables, ANewGridReadsTheProjectionsAgain) {
  auto fly = Transformer::load(tiny_dir());
  auto tab = Transformer::load(tiny_dir());
  const auto r4 = golden_request(4), r6 = golden_request(6);
  tab.use_adaln_tables(evaluation_timesteps(r4.video, r4.audio), true);
  tab.use_adaln_tables(evaluation_timesteps(r6.video, r6.audio), true);
  EXPECT_FALSE(tab.adaln_resident());
  EXPECT_EQ(tab.adaln_tables()->size(), 5u);  // the old grid's tables went
  expect_same(denoise(tab, r6), denoise(fly, r6), "6 grid points after 4");
  // Kept resident on request: the tables serve their grid, the projections any other.
  tab.use_adaln_tables(evaluation_timesteps(r4.video, r4.audio), false);
  EXPECT_TRUE(tab.adaln_resident());
  expect_same(denoise(tab, r6), denoise(fly, r6), "projections kept, another grid");
}

TEST(AdalnTables, AGridTheTablesLackIsRefusedNamingItsTimesteps) {
  const auto loaded = Transformer::load(tiny_dir());
  Transformer m(loaded.config(), loaded.weights());  // no folder to read the projections from
  const auto r = golden_request(4);
  m.use_adaln_tables(evaluation_timesteps(r.video, r.audio), true);
  DitInputs in;
  in.text = r.text;
  in.video = r.noise.video;
  in.audio = r.noise.audio;
  in.t_video = 0.25f;
  in.t_audio = 0.5f;
  try {
    m.forward(in);
    ADD_FAILURE() << "a forward at timesteps the tables lack ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("{0.2500, 0.5000}"), std::string::npos) << msg;
    EXPECT_NE(msg.find("3 other timestep sets"), std::string::npos) << msg;
    EXPECT_NE(msg.find("adaln-tables=false"), std::string::npos) << msg;
  }
  const auto r6 = golden_request(6);
  try {
    m.use_adaln_tables(evaluation_timesteps(r6.video, r6.audio), true);
    ADD_FAILURE() << "tables for a new grid without the projections";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("not loaded from a folder"), std::string::npos) << e.what();
  }
  // The old tables still serve their grid.
  expect_same(denoise(m, r), denoise(loaded, r), "after the refusal");
}

TEST(AdalnTables, SetsThatAreNotOneEvaluationsAreRefused) {
  const auto m = Transformer::load(tiny_dir());
  for (const TimestepSet& bad : {TimestepSet{0.5f, 0.2f}, TimestepSet{}, TimestepSet{0.3f, 0.3f}}) {
    try {
      AdalnTables::compute(m.weights(), m.config(), {bad});
      ADD_FAILURE() << describe(bad) << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(describe(bad)), std::string::npos) << e.what();
    }
  }
}

TEST(AdalnTables, ReleaseConfigAtTp8FitsTheTarget) {
  // 33.12 B parameters, 13.04 B of them AdaLN. At TP 8 in the release dtypes a rank holds 8.28 GB
  // of split weights (33.12 B x 2 / 8) plus the replicated ones (embeddings, norms, time MLP,
  // heads: 0.16 GB), 8.45 GB; with the tables of a 50-point grid instead of the projections
  // 5.26 GB (the target: about 5.2).
  const auto c = DitConfig::load(data_dir() + "/h3-release/transformer/config.json");
  const auto specs = dit_parameters(c);
  int64_t with = 0, without = 0;
  for (const auto& s : specs) {
    int64_t n = 1;
    for (auto d : s.local_shape(8)) n *= d;
    const int64_t bytes = n * (s.fp32 ? 4 : 2);
    with += bytes;
    if (!s.adaln) without += bytes;
  }
  const auto sets = evaluation_timesteps(make_schedule(50, kVideoShift), make_schedule(50, kAudioShift));
  const int64_t tables = adaln_table_bytes(c, sets, 8, 2);
  std::printf("release DiT at TP8: %.2f GB with the projections, %.2f GB with tables (%.3f GB of tables)\n",
              with / 1e9, (without + tables) / 1e9, tables / 1e9);
  EXPECT_NEAR(with / 1e9, 8.445, 0.01);
  EXPECT_NEAR((without + tables) / 1e9, 5.255, 0.01);
  EXPECT_NEAR(tables / 1e9, 0.120, 0.005);
}

}  // namespace
}  // namespace h3::dit
