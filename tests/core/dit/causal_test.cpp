// The chunk-causal sampler (RAVEN-Streaming) against the reference vectors of
// tests/data/causal (README there): the chunk cut and the RNG draws bit for bit, every chunk's
// per-step x0 within 1e-4 at 1 and 2 ranks for seven shapes (k = 1, 2, 4 chunks; sink/window
// 2/2, 1/0 and 1/1 with 3 steps), the single-chunk check of the causal lane, the KV cache's
// retention and bytes, and the LoRA file's mapping, sharding and refusals.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "../../temp_dir.h"
#include "dist/world.h"
#include "dit/consistency_sampler.h"
#include "dit/lora.h"
#include "dit_test_util.h"
#include "h3/error.h"
#include "io/safetensors.h"

namespace h3::dit {
namespace {

namespace fs = std::filesystem;
using testing::causal_dir;
using testing::data_dir;
using testing::golden_dir;
using testing::max_abs_diff;
using testing::read_tensors;
using testing::tiny_with_lora;

constexpr double kTolerance = 1e-4;  // per-chunk x0 and final latents (README: Tolerances)

std::string lora_dir() {
  return causal_dir() + "/lora";
}

// What one run of a case gives: every step's x0 by "chunk<c>.step<i>.x0_video" names, the
// final latents, and the cache at the end.
struct CaseRun {
  std::map<std::string, at::Tensor> x0;
  at::Tensor video, audio;  // [1, 24, T, h, w], [1, 32, 2, A]
  int64_t forwards = 0, cache_committed = 0, cache_rows = 0;
  std::vector<int64_t> cache_records;
  std::vector<ChunkSpan> spans;
};

CaseRun run_case(const Transformer& model, const CausalRequest& r) {
  CaseRun out;
  CausalSampler s(model, r);
  out.spans = s.spans();
  std::vector<at::Tensor> v, a;
  while (!s.done()) {
    auto chunk =
        s.next([&](const ChunkSpan& span, int64_t step, int64_t, const at::Tensor& xv, const at::Tensor& xa) {
          const std::string p = "chunk" + std::to_string(span.index) + ".step" + std::to_string(step);
          out.x0[p + ".x0_video"] = xv.clone();
          out.x0[p + ".x0_audio"] = xa.clone();
        });
    v.push_back(chunk.video);
    a.push_back(audio_latent_of(chunk.audio));
  }
  out.video = at::cat(v, 2);
  out.audio = at::cat(a, 3);
  out.forwards = s.forwards();
  out.cache_committed = s.cache().committed();
  out.cache_rows = s.cache().rows();
  out.cache_records = s.cache().records();
  return out;
}

// Every step's x0 and the final latents of `run` against the case's file.
void expect_matches(const std::string& name, const CaseRun& run, const std::map<std::string, at::Tensor>& t,
                    const char* label) {
  int64_t compared = 0;
  double worst = 0;
  for (const auto& [key, want] : t) {
    if (key.rfind("chunk", 0) != 0) continue;
    ASSERT_TRUE(run.x0.count(key)) << name << ": no " << key;
    ASSERT_EQ(run.x0.at(key).sizes(), want.sizes()) << name << " " << key;
    const double d = max_abs_diff(run.x0.at(key), want);
    EXPECT_LE(d, kTolerance) << name << " " << key << " (" << label << ")";
    worst = std::max(worst, d);
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int64_t>(run.x0.size())) << name << ": steps the reference does not have";
  const double dv = max_abs_diff(run.video, t.at("final_video"));
  const double da = max_abs_diff(run.audio, t.at("final_audio"));
  EXPECT_LE(dv, kTolerance) << name;
  EXPECT_LE(da, kTolerance) << name;
  std::printf("%s (%s): %lld x0 tensors, max |dx0| = %.3g, final video %.3g, audio %.3g\n", name.c_str(),
              label, static_cast<long long>(compared), worst, dv, da);
}

const char* const kCases[] = {"k1_sink2_window2",       "k1_sink1_window0", "k2_sink2_window2",
                              "k2_sink1_window0",       "k4_sink2_window2", "k4_sink1_window0",
                              "k2_sink1_window1_steps3"};

TEST(CausalLayout, ChunkCutAndRowsAreTheReferences) {
  for (const char* name : kCases) {
    const auto& spec = testing::causal_case(name);
    const auto& L = spec["layout"];
    const auto spans = cut_chunks(L["latent_t"].get<int64_t>(), L["audio_t"].get<int64_t>());
    ASSERT_EQ(static_cast<int64_t>(spans.size()), L["num_chunks"].get<int64_t>()) << name;
    const int64_t gh = L["latent_h"].get<int64_t>() / 2, gw = L["latent_w"].get<int64_t>() / 2;
    for (size_t i = 0; i < spans.size(); ++i) {
      const auto& c = L["chunks"][i];
      EXPECT_EQ(spans[i].video_begin, c["video_latents"][0].get<int64_t>()) << name << " chunk " << i;
      EXPECT_EQ(spans[i].video_end, c["video_latents"][1].get<int64_t>()) << name << " chunk " << i;
      EXPECT_EQ(spans[i].audio_begin, c["audio_latents"][0].get<int64_t>()) << name << " chunk " << i;
      EXPECT_EQ(spans[i].audio_end, c["audio_latents"][1].get<int64_t>()) << name << " chunk " << i;
      EXPECT_EQ(spans[i].rows(gh, gw), c["rows"].get<int64_t>()) << name << " chunk " << i;
      // The chunk's first row (its first left audio latent) sits at L + its first audio latent.
      const auto pos = chunk_positions(spec["request"]["text_rows"].get<int64_t>(), spans[i], gh, gw);
      EXPECT_DOUBLE_EQ(pos[0][0].item<double>(), c["first_position_t"].get<double>())
          << name << " chunk " << i;
    }
  }
  EXPECT_THROW(cut_chunks(8, 50), Error);   // not 5k + 2
  EXPECT_THROW(cut_chunks(12, 40), Error);  // audio ends before the tail starts (57)
}

TEST(CausalLayout, PositionsAreTheDenseLayoutsRows) {
  // A 39-frame clip: every chunk's positions are the rows of the dense packed sequence's
  // positions for the same latents (audio rows first, then video).
  const int64_t L = 7, T = 12, A = 65, gh = 2, gw = 3;
  const auto dense = packed_positions(L, A, T, gh, gw);
  for (const auto& s : cut_chunks(T, A)) {
    std::vector<int64_t> rows;
    for (int64_t ch = 0; ch < 2; ++ch) {
      for (int64_t j = s.audio_begin; j < s.audio_end; ++j) rows.push_back(L + ch * A + j);
    }
    for (int64_t r = s.video_begin * gh * gw; r < s.video_end * gh * gw; ++r) rows.push_back(L + 2 * A + r);
    const auto want = dense.index_select(0, at::tensor(rows, at::kLong));
    EXPECT_LE(max_abs_diff(chunk_positions(L, s, gh, gw), want), 1e-12) << "chunk " << s.index;
  }
}

TEST(CausalSampler, GridsAndTimestepsAreTheReferences) {
  const auto& spec = testing::causal_case("k1_sink2_window2");
  const auto sv = consistency_sigmas(4, 12.0), sa = consistency_sigmas(4, 3.0);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(sv[i], spec["sampler"]["video_sigmas"][i].get<double>());
    EXPECT_DOUBLE_EQ(sa[i], spec["sampler"]["audio_sigmas"][i].get<double>());
  }
}

TEST(CausalSampler, DenseLaneCheckSingleChunkHoldingTheWholeClip) {
  // The harness's check of its own lane against diffusers' dense forward: one chunk holding the
  // whole clip, the cache holding only the text. Here the engine's lane against those numbers.
  auto model = tiny_with_lora();
  auto t = read_tensors(causal_dir() + "/dense_check.safetensors");
  const auto text = t.at("single.text").select(0, 0);
  const auto video = t.at("single.video_xt");
  const auto audio = t.at("single.audio_xt");
  KvCache cache(model.config().num_layers, 1, std::nullopt);
  prefill_text(model, text, {}, cache);
  ChunkInputs in;
  in.span.video_end = video.size(2);
  in.span.audio_end = audio.size(3);
  in.text_rows = text.size(0);
  in.video = video;
  in.audio = audio_rows_of(audio);
  in.t_video = 1.0f - 0.7f;
  in.t_audio = 1.0f - 0.35f;
  const auto v = forward_chunk(model, in, cache, ChunkPass::kNoise);
  const double dv = max_abs_diff(v.video, t.at("single.velocity_video"));
  const double da = max_abs_diff(audio_latent_of(v.audio), t.at("single.velocity_audio"));
  std::printf("single-chunk causal lane: max |dv_video| = %.3g, max |dv_audio| = %.3g\n", dv, da);
  EXPECT_LE(dv, kTolerance);
  EXPECT_LE(da, kTolerance);
  // A noise forward never writes the cache.
  EXPECT_EQ(cache.committed(), 1);
  EXPECT_EQ(cache.rows(), text.size(0));
}

class CausalCase : public ::testing::TestWithParam<const char*> {};

TEST_P(CausalCase, EveryStepsX0MatchesTheReferenceAtOneRank) {
  const std::string name = GetParam();
  const auto& spec = testing::causal_case(name);
  const auto t = read_tensors(causal_dir() + "/" + spec["file"].get<std::string>());
  auto model = tiny_with_lora();
  const auto r = testing::causal_request(spec, t);
  const auto run = run_case(model, r);
  expect_matches(name, run, t, "1 rank");
  // The cache at the end: records committed and retained as the reference's.
  const auto& end = spec["kv_cache_end"];
  EXPECT_EQ(run.cache_committed, end["committed_chunks"].get<int64_t>()) << name;
  EXPECT_EQ(static_cast<int64_t>(run.cache_records.size()), end["retained_chunks"].get<int64_t>()) << name;
  EXPECT_EQ(run.cache_rows, end["retained_rows"].get<int64_t>()) << name;
  // Forwards: the prefill, steps per chunk, and a commit per chunk but the last unless the
  // cache would drop it at once (window 0 once the sink is full).
  const auto& f = spec["forwards"];
  const int64_t skipped = r.settings.window == std::optional<int64_t>(0)
                              ? std::max<int64_t>(0, f["clean"].get<int64_t>() - (r.settings.sink - 1))
                              : 0;
  EXPECT_EQ(run.forwards,
            f["prefill"].get<int64_t>() + f["noise"].get<int64_t>() + f["clean"].get<int64_t>() - skipped)
      << name;
}

INSTANTIATE_TEST_SUITE_P(Cases, CausalCase, ::testing::ValuesIn(kCases));

TEST(CausalSampler, TheWholeClipDrawsAreTheSeedsBitForBit) {
  // The contract's first four draws, replayed from the seed.
  const auto& spec = testing::causal_case("k2_sink2_window2");
  const auto t = read_tensors(causal_dir() + "/" + spec["file"].get<std::string>());
  auto gen = at::make_generator<at::CPUGeneratorImpl>(spec["sampler"]["seed"].get<uint64_t>());
  const auto o = at::TensorOptions().dtype(at::kFloat);
  EXPECT_TRUE(at::equal(at::randn(t.at("noise_video").sizes(), gen, o), t.at("noise_video")));
  EXPECT_TRUE(at::equal(at::randn(t.at("noise_audio").sizes(), gen, o), t.at("noise_audio")));
  EXPECT_TRUE(at::equal(at::randn(t.at("clean_eps_video").sizes(), gen, o), t.at("clean_eps_video")));
  EXPECT_TRUE(at::equal(at::randn(t.at("clean_eps_audio").sizes(), gen, o), t.at("clean_eps_audio")));
}

// remake_with_text in a step's callback makes the chunk again from its own draws under the new
// text: a finite clip's latents are, bit for bit, those of change_text before that chunk (the
// whole-clip draws kept for it, the per-step noise from the generator put back), with the kept
// chunks' records as they were or recomputed (recache); only the forwards differ, by those run
// before the remake.
TEST(CausalSampler, AChunkRemadeUnderANewTextIsTheChunkThatTextWouldHaveGiven) {
  const auto& spec = testing::causal_case("k4_sink2_window2");
  const auto t = read_tensors(causal_dir() + "/" + spec["file"].get<std::string>());
  const Transformer model = tiny_with_lora();
  for (const bool recache : {false, true}) {
    CausalRequest r = testing::causal_request(spec, t);
    r.settings.recache_on_switch = recache;
    const at::Tensor other = r.text.flip(0).mul(0.5).contiguous();
    auto run = [&](bool remake) {
      CausalSampler s(model, r);
      std::vector<at::Tensor> v, a;
      while (!s.done()) {
        if (!remake && s.next_index() == 2) s.change_text(other, {});
        bool remade = false;
        auto chunk =
            s.next([&](const ChunkSpan& span, int64_t step, int64_t, const at::Tensor&, const at::Tensor&) {
              if (remake && span.index == 2 && step == 1 && !remade) {
                s.remake_with_text(other, {});
                remade = true;
              }
            });
        v.push_back(chunk.video);
        a.push_back(chunk.audio);
      }
      return std::make_tuple(at::cat(v, 2), at::cat(a, 0), s.forwards());
    };
    const auto [v_changed, a_changed, f_changed] = run(false);
    const auto [v_remade, a_remade, f_remade] = run(true);
    const char* mode = recache ? "recache" : "keep";
    EXPECT_TRUE(at::equal(v_changed, v_remade)) << mode;
    EXPECT_TRUE(at::equal(a_changed, a_remade)) << mode;
    EXPECT_EQ(f_remade, f_changed + 2) << mode;  // chunk 2's first two forwards, run again
    // And the text changed the clip: not the unchanged run's latents from chunk 2 on.
    CausalSampler plain(model, r);
    std::vector<at::Tensor> v;
    while (!plain.done()) v.push_back(plain.next().video);
    EXPECT_FALSE(at::equal(at::cat(v, 2), v_changed)) << mode;
  }
}

TEST(CausalSampler, TwoRanksMatchTheReferenceAndEachOther) {
  for (const char* name :
       {"k2_sink2_window2", "k4_sink2_window2", "k2_sink1_window1_steps3", "k4_sink1_window0"}) {
    const auto& spec = testing::causal_case(name);
    const auto t = read_tensors(causal_dir() + "/" + spec["file"].get<std::string>());
    std::vector<CaseRun> runs(2);
    std::vector<int64_t> cache_bytes(2);
    auto results = dist::run_threads(2, [&](dist::Group& g) {
      at::set_num_threads(1);
      auto model = tiny_with_lora(&g);
      runs[static_cast<size_t>(g.rank())] = run_case(model, testing::causal_request(spec, t));
    });
    for (const auto& r : results) ASSERT_TRUE(r.ok) << name << " rank " << r.rank << ": " << r.error;
    for (int r = 0; r < 2; ++r)
      expect_matches(name, runs[static_cast<size_t>(r)], t, r == 0 ? "rank 0 of 2" : "rank 1 of 2");
    // The all-reduce and the broadcast draws leave both ranks with the same numbers.
    EXPECT_TRUE(at::equal(runs[0].video, runs[1].video)) << name;
    EXPECT_TRUE(at::equal(runs[0].audio, runs[1].audio)) << name;
  }
}

// The ranks of one world run different intra-op thread counts (thread ranks share their process's
// cores, an `h3 worker` has its own), and a LoRA clip is the same bits whatever each runs: one rank
// at 1, 2, 3 and 4 threads, and two ranks at 1 + 1 and at 3 + 2 threads. (On AVX-512 oneDNN
// happens to sum alike at these counts; meson test core_threads_avx2 runs this with oneDNN and MKL
// held to AVX2, where a GEMM split between threads changes the bits.)
TEST(CausalSampler, ALoraClipIsTheSameBitsWhateverThreadsEachRankRuns) {
  const int saved = at::get_num_threads();
  const auto& spec = testing::causal_case("k2_sink2_window2");
  const auto t = read_tensors(causal_dir() + "/" + spec["file"].get<std::string>());
  const CausalRequest r = testing::causal_request(spec, t);
  auto one_rank = [&](int threads) {
    at::set_num_threads(threads);
    return testing::causal_outputs(tiny_with_lora(), r);
  };
  const std::vector<at::Tensor> want = one_rank(1);
  for (int threads : {2, 3, 4}) {
    const std::vector<at::Tensor> got = one_rank(threads);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(at::equal(got[i], want[i])) << "1 rank at " << threads << " threads, output " << i
                                              << ": max |diff| " << max_abs_diff(got[i], want[i]);
    }
  }
  at::set_num_threads(saved);
  auto two_ranks = [&](int threads0, int threads1) {
    std::vector<std::vector<at::Tensor>> out(2);
    auto results = dist::run_threads(2, [&](dist::Group& g) {
      at::set_num_threads(g.rank() == 0 ? threads0 : threads1);
      out[static_cast<size_t>(g.rank())] = testing::causal_outputs(tiny_with_lora(&g), r);
    });
    for (const auto& res : results) EXPECT_TRUE(res.ok) << "rank " << res.rank << ": " << res.error;
    EXPECT_EQ(out[0].size(), out[1].size());
    return out[0];
  };
  const std::vector<at::Tensor> even = two_ranks(1, 1), uneven = two_ranks(3, 2);
  ASSERT_EQ(even.size(), uneven.size());
  ASSERT_FALSE(even.empty());
  for (size_t i = 0; i < even.size(); ++i) {
    EXPECT_TRUE(at::equal(even[i], uneven[i])) << "2 ranks at 1 + 1 against 3 + 2 threads, output " << i
                                               << ": max |diff| " << max_abs_diff(even[i], uneven[i]);
  }
}

TEST(CausalSampler, BadSettingsAreRefusedNamingTheSetting) {
  auto model = Transformer::load(golden_dir() + "/transformer_tiny");
  const auto& spec = testing::causal_case("k1_sink2_window2");
  const auto t = read_tensors(causal_dir() + "/" + spec["file"].get<std::string>());
  auto expect_refused = [&](const std::function<void(CausalRequest&)>& edit, const std::string& words) {
    auto r = testing::causal_request(spec, t);
    edit(r);
    try {
      CausalSampler s(model, r);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_refused([](CausalRequest& r) { r.settings.sink = 0; }, "sink = 0");
  expect_refused([](CausalRequest& r) { r.settings.steps = 0; }, "steps = 0");
  expect_refused([](CausalRequest& r) { r.settings.window = -2; }, "window = -2");
  expect_refused([](CausalRequest& r) { r.settings.video_shift = 0; }, "video-shift");
  expect_refused([](CausalRequest& r) { r.video_latents = 8; }, "5k + 2");
}

TEST(KvCache, RetainsSinkAndWindowCountedInChunksWithTheTextFirst) {
  auto rec = [](int64_t rows, float v) { return std::vector<at::Tensor>{at::full({rows, 1, 2}, v)}; };
  KvCache c(1, 2, 2);
  for (int64_t i = 0; i < 6; ++i) c.commit(rec(i + 1, float(i)), rec(i + 1, float(-i)));
  // After 6 commits: records 0, 1 pinned, 4, 5 the window.
  EXPECT_EQ(c.records(), (std::vector<int64_t>{0, 1, 4, 5}));
  EXPECT_EQ(c.rows(), 1 + 2 + 5 + 6);
  EXPECT_EQ(c.keys(0).size(0), 14);
  EXPECT_EQ(c.keys(0)[3][0][0].item<float>(), 4.0f);  // record 4's first row follows records 0 and 1
  EXPECT_EQ(c.values(0)[13][0][0].item<float>(), -5.0f);
  EXPECT_EQ(c.bytes(), 2 * 14 * 2 * 4);
  KvCache none(1, 1, std::nullopt);
  for (int64_t i = 0; i < 5; ++i) none.commit(rec(1, 0), rec(1, 0));
  EXPECT_EQ(none.records().size(), 5u);
  KvCache sink_only(1, 1, 0);
  EXPECT_TRUE(sink_only.retains_next());
  sink_only.commit(rec(3, 0), rec(3, 0));
  EXPECT_FALSE(sink_only.retains_next());
  EXPECT_THROW(KvCache(1, 0, 2), Error);
  EXPECT_THROW(KvCache(1, 1, -1), Error);
}

// ---- LoRA ----

// A LoRA file with the given tensors (keys as given) in a fresh folder `name` inside this program's
// scratch folder (removed at exit).
std::string write_lora(const std::string& name,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::string& config = "") {
  static const test::TempDir root("dit-lora");
  const fs::path dir = fs::path(root.str()) / name;
  fs::create_directories(dir);
  io::write_safetensors((dir / "adapter_model.safetensors").string(), tensors);
  if (!config.empty()) std::ofstream(dir / "adapter_config.json") << config;
  return dir.string();
}

std::vector<std::pair<std::string, at::Tensor>> lora_tensors() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  auto f = io::SafetensorsFile::open(lora_dir() + "/adapter_model.safetensors");
  for (const auto& info : f->tensors()) out.emplace_back(info.name, f->view(info.name).clone());
  return out;
}

TEST(Lora, MapsRavensModulesOntoTheDiffusersLayers) {
  auto model = Transformer::load(golden_dir() + "/transformer_tiny");
  const auto sum = model.attach_lora(lora_dir());
  EXPECT_EQ(sum.modules, 26);
  EXPECT_EQ(sum.adapted_layers, 26 + 2 * 4);  // 4 fused qkv modules adapt three layers each
  EXPECT_EQ(sum.rank, 4);
  EXPECT_DOUBLE_EQ(sum.alpha, 8.0);
  EXPECT_EQ(sum.alpha_source, "adapter_config.json");
  const auto& b0 = model.weights().blocks[0];
  auto f = io::SafetensorsFile::open(lora_dir() + "/adapter_model.safetensors");
  const auto qkv_b = f->view("base_model.model.dit.blocks.0.attn.qkv_proj.lora_B.weight");
  EXPECT_TRUE(at::equal(b0.to_k_lora.up, qkv_b.narrow(0, 256, 256)));  // [Q; K; V] row blocks
  const auto fc1_b = f->view("base_model.model.dit.blocks.0.mlp.fc1.lora_B.weight");
  EXPECT_TRUE(
      at::equal(b0.ff_in_lora.up.narrow(0, 0, 256), fc1_b.narrow(0, 256, 256)));  // [gate; up] -> [up; gate]
  EXPECT_DOUBLE_EQ(b0.ff_in_lora.scale, 2.0);
  EXPECT_TRUE(model.weights().time_linear_1.lora.defined());
  EXPECT_TRUE(model.weights().norm_out_linear.lora.defined());
  EXPECT_FALSE(model.weights().refiner[0].adaln.lora.defined());
  model.detach_lora();
  EXPECT_FALSE(b0.to_k_lora.defined());
}

// `s` with its first `from` replaced by `to`.
std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

TEST(Lora, DenseForwardWithTheLoraIsDiffusersWithIt) {
  // The ordinary sampler's forward with the adapter attached against diffusers' dense forward
  // with the same adapter on its modules (dense_lora.safetensors).
  const auto t = read_tensors(causal_dir() + "/dense_lora.safetensors");
  const auto in = testing::case_inputs(t);
  auto model = tiny_with_lora();
  const auto v = model.forward(in);
  const double dv = max_abs_diff(v.video, t.at("velocity_video"));
  const double da = max_abs_diff(v.audio, t.at("velocity_audio"));
  std::printf("dense forward with the LoRA: max |dv_video| = %.3g, max |dv_audio| = %.3g\n", dv, da);
  EXPECT_LE(dv, kTolerance);
  EXPECT_LE(da, kTolerance);
  model.detach_lora();
  const auto base = model.forward(in);
  EXPECT_LE(max_abs_diff(base.video, t.at("velocity_video_base")), kTolerance);
  EXPECT_GT(max_abs_diff(base.video, t.at("velocity_video")), 0.1);  // the adapter matters
}

TEST(Lora, DiffusersNamedFileGivesTheSameVelocities) {
  // The same adapter written on diffusers' names (qkv split, fc1 halves swapped by hand)
  // adapts the same layers with the same numbers.
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [k, v] : lora_tensors()) {
    std::string m = k.substr(std::string("base_model.model.dit.").size());
    const bool is_b = m.find(".lora_B.") != std::string::npos;
    const std::string suffix = is_b ? ".lora_B.weight" : ".lora_A.weight";
    m = m.substr(0, m.size() - suffix.size());
    auto rename = [&](std::string s) {
      for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{
               {"token_refiner.blocks.", "token_refiner.refiner_blocks."},
               {"blocks.", "transformer_blocks."}}) {
        if (s.rfind(from, 0) == 0) return to + s.substr(from.size());
      }
      return s;
    };
    if (m.find("attn.qkv_proj") != std::string::npos) {
      const std::string base = rename(m.substr(0, m.size() - std::string("qkv_proj").size()));
      const char* parts[] = {"to_q", "to_k", "to_v"};
      for (int p = 0; p < 3; ++p) {
        out.emplace_back("transformer." + base + parts[p] + suffix,
                         is_b ? v.narrow(0, p * 256, 256).clone() : v);
      }
      continue;
    }
    static const std::map<std::string, std::string> top{{"video_patch_proj", "proj_in"},
                                                        {"audio_patch_proj", "audio_proj_in"},
                                                        {"condition_proj", "context_embedder"},
                                                        {"time_embedder.proj_in", "time_embedder.linear_1"},
                                                        {"time_embedder.proj_out", "time_embedder.linear_2"},
                                                        {"final_layer.adaln_proj.linear", "norm_out.linear"},
                                                        {"final_layer.video_out", "proj_out"},
                                                        {"final_layer.audio_out", "audio_proj_out"}};
    std::string d = top.count(m) ? top.at(m) : rename(m);
    d = replaced(d, "attn.out_proj", "attn.to_out.0");
    d = replaced(d, "mlp.fc2", "ff.net.2");
    at::Tensor t = v;
    if (d.find("mlp.fc1") != std::string::npos) {
      d = replaced(d, "mlp.fc1", "ff.net.0.proj");
      if (is_b) t = at::cat({v.narrow(0, 256, 256), v.narrow(0, 0, 256)});
    }
    out.emplace_back("transformer." + d + suffix, t);
  }
  const std::string dir =
      write_lora("diffusers", out, "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8.0}");
  const auto in = testing::case_inputs(read_tensors(golden_dir() + "/case_tiny_t2_h4w6_L5.safetensors"));
  auto a = tiny_with_lora();
  auto b = Transformer::load(golden_dir() + "/transformer_tiny");
  EXPECT_EQ(b.attach_lora(dir).adapted_layers, 34);
  const auto va = a.forward(in), vb = b.forward(in);
  EXPECT_LE(max_abs_diff(va.video, vb.video), 1e-6);
  EXPECT_LE(max_abs_diff(va.audio, vb.audio), 1e-6);
  // And the LoRA matters: without it the velocities move.
  b.detach_lora();
  EXPECT_GT(max_abs_diff(b.forward(in).video, va.video), 1e-2);
  fs::remove_all(dir);
}

TEST(Lora, SplitsUnderTensorParallelismWithoutChangingTheForward) {
  const auto in = testing::case_inputs(read_tensors(golden_dir() + "/case_tiny_t7_h6w8_L17.safetensors"));
  const auto one = tiny_with_lora().forward(in);
  std::vector<Velocity> two(2);
  std::vector<std::vector<int64_t>> shard_shapes(2);
  auto results = dist::run_threads(2, [&](dist::Group& g) {
    at::set_num_threads(1);
    auto m = tiny_with_lora(&g);
    const auto& b = m.weights().blocks[1];
    shard_shapes[static_cast<size_t>(g.rank())] = {b.to_q_lora.up.size(0),     b.to_q_lora.down.size(1),
                                                   b.to_out_lora.down.size(1), b.to_out_lora.up.size(0),
                                                   b.ff_in_lora.up.size(0),    b.adaln.lora.up.size(0)};
    two[static_cast<size_t>(g.rank())] = m.forward(in);
  });
  for (const auto& r : results) ASSERT_TRUE(r.ok) << "rank " << r.rank << ": " << r.error;
  for (int r = 0; r < 2; ++r) {
    // Column-parallel: B's rows halve, A whole; row-parallel: A's columns halve, B whole.
    EXPECT_EQ(shard_shapes[static_cast<size_t>(r)], (std::vector<int64_t>{128, 128, 128, 128, 256, 1152}));
    EXPECT_LE(max_abs_diff(two[static_cast<size_t>(r)].video, one.video), 2e-5) << "rank " << r;
    EXPECT_LE(max_abs_diff(two[static_cast<size_t>(r)].audio, one.audio), 2e-5) << "rank " << r;
  }
}

TEST(Lora, RefusalsNameTheModuleAndBothShapes) {
  auto model = Transformer::load(golden_dir() + "/transformer_tiny");
  auto refused = [&](const std::string& dir, ErrorKind kind, std::vector<std::string> words) {
    try {
      model.attach_lora(dir);
      ADD_FAILURE() << "accepted " << dir;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      for (const auto& w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
    }
    // Nothing was attached.
    EXPECT_FALSE(model.weights().blocks[0].to_q_lora.defined());
    fs::remove_all(dir);
  };
  auto a = at::randn({4, 128}), b = at::randn({128, 4});
  // Another model: out_proj's A has the wrong input width.
  refused(
      write_lora("shape", {{"base_model.model.dit.blocks.0.attn.out_proj.lora_A.weight", at::randn({4, 512})},
                           {"base_model.model.dit.blocks.0.attn.out_proj.lora_B.weight", b}}),
      ErrorKind::kMismatch, {"blocks.0.attn.out_proj", "[4, 512]", "[128, 4]", "[128, 256]"});
  refused(write_lora("block", {{"base_model.model.dit.blocks.7.mlp.fc2.lora_A.weight", at::randn({4, 256})},
                               {"base_model.model.dit.blocks.7.mlp.fc2.lora_B.weight", b}}),
          ErrorKind::kMismatch, {"blocks.7.mlp.fc2", "2 blocks"});
  refused(write_lora("unknown", {{"base_model.model.dit.vision_tower.proj.lora_A.weight", a},
                                 {"base_model.model.dit.vision_tower.proj.lora_B.weight", b}}),
          ErrorKind::kFormat, {"vision_tower.proj", "another model"});
  refused(write_lora("key", {{"base_model.model.dit.blocks.0.attn.out_proj.weight", b}}), ErrorKind::kFormat,
          {"blocks.0.attn.out_proj.weight", "not a LoRA tensor"});
  auto nan = at::randn({128, 4});
  nan[3][1] = std::numeric_limits<float>::quiet_NaN();
  refused(write_lora("nan", {{"base_model.model.dit.condition_proj.lora_A.weight", at::randn({4, 64})},
                             {"base_model.model.dit.condition_proj.lora_B.weight", nan}}),
          ErrorKind::kFormat, {"condition_proj.lora_B.weight", "NaN"});
  refused(write_lora("half", {{"base_model.model.dit.condition_proj.lora_A.weight", at::randn({4, 64})}}),
          ErrorKind::kFormat, {"condition_proj", "only its lora_A"});
  refused(write_lora("norm", {{"base_model.model.dit.blocks.0.norm1.lora_A.weight", a},
                              {"base_model.model.dit.blocks.0.norm1.lora_B.weight", b}}),
          ErrorKind::kMismatch, {"blocks.0.norm1", "not a linear layer"});
  refused(write_lora("dora",
                     {{"base_model.model.dit.condition_proj.lora_A.weight", at::randn({4, 64})},
                      {"base_model.model.dit.condition_proj.lora_B.weight", b}},
                     "{\"peft_type\": \"LORA\", \"use_dora\": true}"),
          ErrorKind::kFormat, {"adapter_config.json", "DoRA"});
  try {
    model.attach_lora("/nonexistent/lora.safetensors");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/lora.safetensors"), std::string::npos);
  }
}

TEST(Lora, AlphaFromATensorOrMetadataWinsOverTheConfig) {
  auto model = Transformer::load(golden_dir() + "/transformer_tiny");
  const auto a = at::randn({4, 64}), b = at::randn({128, 4});
  const std::string dir = write_lora("alpha",
                                     {{"base_model.model.dit.condition_proj.lora_A.weight", a},
                                      {"base_model.model.dit.condition_proj.lora_B.weight", b},
                                      {"base_model.model.dit.condition_proj.alpha", at::tensor(2.0f)}},
                                     "{\"lora_alpha\": 64}");
  const auto s = model.attach_lora(dir);
  EXPECT_EQ(s.alpha_source, "tensor");
  EXPECT_DOUBLE_EQ(model.weights().context_embedder.lora.scale, 0.5);
  fs::remove_all(dir);
  const std::string none = write_lora("noalpha", {{"base_model.model.dit.condition_proj.lora_A.weight", a},
                                                  {"base_model.model.dit.condition_proj.lora_B.weight", b}});
  fs::remove(fs::path(none) / "adapter_config.json");
  EXPECT_EQ(model.attach_lora(none).alpha_source, "none (alpha = r)");
  EXPECT_DOUBLE_EQ(model.weights().context_embedder.lora.scale, 1.0);
  fs::remove_all(none);
}

}  // namespace
}  // namespace h3::dit
