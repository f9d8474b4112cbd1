// The Qwen3-VL text path against the reference's hidden states on the golden tiny encoder
// (fp32, within 1e-4), at TP1 and TP2 (TP2 equal to TP1 within 1e-5), and its errors.
#include "text/text_encoder.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "dist/group.h"
#include "dist/world.h"
#include "golden_encoder.h"
#include "text/tokenizer.h"
#include "text_test_util.h"

namespace h3::text {
namespace {

constexpr int64_t kGoldenLayer = 4;  // the tiny encoder's conditioning: hidden_states[4]

const std::string& golden_encoder() {
  static test::TempDir dir("te-golden");
  static const bool written = (test::write_golden_encoder(dir.str()), true);
  (void)written;
  static const std::string path = dir.str();
  return path;
}

std::map<std::string, at::Tensor> golden_case(const std::string& name) {
  return test::read_tensors(test::text_golden_dir() + "/case_tiny_" + name + ".safetensors");
}

const char* const kCases[] = {"single_char", "ascii_simple", "h3_prompt"};

TEST(TextEncoder, GoldenHiddenStatesAtTp1) {
  const auto enc = TextEncoder::load(golden_encoder(), kGoldenLayer);
  EXPECT_EQ(enc.config().num_layers, 6);
  EXPECT_EQ(enc.layer(), kGoldenLayer);
  EXPECT_EQ(enc.width(), 128);
  for (const char* name : kCases) {
    auto c = golden_case(name);
    std::vector<at::Tensor> all;
    const auto hidden = enc.forward(c.at("input_ids"), c.at("position_ids"), &all);
    const double d = test::max_abs_diff(hidden, c.at("hidden"));
    std::printf("%s: L %lld, max |d hidden_states[4]| = %.3g\n", name, (long long)hidden.size(0), d);
    EXPECT_LE(d, 1e-4) << name;
    ASSERT_EQ(all.size(), size_t(kGoldenLayer + 1));
    for (int64_t i = 0; i <= kGoldenLayer; ++i) {
      EXPECT_LE(test::max_abs_diff(all[i], c.at("hidden_states")[i]), 1e-4)
          << name << " hidden_states[" << i << "]";
    }
  }
}

// In bf16 (the release's dtype, and the engine's on CUDA), against the same fp32 reference. Each
// weight and each layer's activations are rounded to bf16 (unit roundoff u = 2^-8); through K
// residual layers the rounding errors add up, so the hidden state may be off by about 2·K·u of
// its magnitude (weights and activations of each layer): the bound is 2·K·u·max|reference|.
TEST(TextEncoder, GoldenHiddenStatesInBf16WithinTheRoundingBound) {
  EncoderOptions o;
  o.dtype = at::kBFloat16;
  const auto enc = TextEncoder::load(golden_encoder(), kGoldenLayer, nullptr, o);
  for (const auto& [name, t] : enc.named()) ASSERT_EQ(t.scalar_type(), at::kBFloat16) << name;
  const double u = std::ldexp(1.0, -8);
  for (const char* name : kCases) {
    auto c = golden_case(name);
    const at::Tensor hidden = enc.forward(c.at("input_ids"), c.at("position_ids"));
    ASSERT_EQ(hidden.scalar_type(), at::kBFloat16);
    const at::Tensor ref = c.at("hidden");
    const double scale = ref.abs().max().item<double>();
    const double d = test::max_abs_diff(hidden.to(at::kFloat), ref);
    const double bound = 2.0 * kGoldenLayer * u * scale;
    std::printf("%s: bf16 max |d hidden| = %.4g (%.2f u of max|ref| %.3g; bound %.4g)\n", name, d,
                d / (u * scale), scale, bound);
    EXPECT_LE(d, bound) << name;
    EXPECT_GT(d, 0.0) << name << ": bf16 equals fp32 exactly: the dtype did not reach the encoder";
  }
}

TEST(TextEncoder, PromptThroughTokenizerGivesTheGoldenIds) {
  const auto tok = Tokenizer::load(test::shipped_tokenizer_dir());
  const auto enc = TextEncoder::load(golden_encoder(), kGoldenLayer);
  for (const char* name : kCases) {
    auto c = golden_case(name);
    const auto bytes = c.at("prompt_utf8");
    const std::string prompt(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel()));
    const auto ids = tok.encode(prompt);
    const auto want = c.at("input_ids");
    ASSERT_EQ(int64_t(ids.size()), want.numel()) << name;
    EXPECT_TRUE(at::equal(at::tensor(ids, at::kLong), want)) << name;
    const Conditioning cond = enc.encode(ids);
    EXPECT_EQ(cond.embeds.scalar_type(), at::kFloat);
    EXPECT_LE(test::max_abs_diff(cond.embeds, c.at("hidden")), 1e-4) << name;
    EXPECT_TRUE(at::equal(cond.tags, c.at("tags"))) << name;  // every row is text: tag 1
  }
}

TEST(TextEncoder, MropePositionsAreInterleavedBySection) {
  EncoderConfig c;
  c.head_dim = 32;
  c.mrope_section = {6, 5, 5};
  c.rope_theta = 5e6;
  // Distinct positions per axis: frequency j (< 16) takes t, h or w as j % 3 assigns it.
  auto pos = at::tensor({10, 20, 30}, at::kLong).view({3, 1});
  auto [cos, sin] = mrope_cos_sin(c, pos);
  for (int64_t j = 0; j < 16; ++j) {
    const int64_t axis = (j % 3 == 1 && j < 15) ? 1 : (j % 3 == 2 && j < 15) ? 2 : 0;
    const double angle = (10.0 * (axis + 1)) / std::pow(5e6, 2.0 * j / 32.0);
    EXPECT_NEAR(cos[0][j].item<double>(), std::cos(angle), 1e-5) << j;
    EXPECT_NEAR(sin[0][j + 16].item<double>(), std::sin(angle), 1e-5) << j;
  }
}

// In fp32 a bf16 embed_tokens stays bf16 (half the largest tensor: 1.56 GB of the release's) and is
// widened row by row on lookup, which is exact: the hidden states are those of the same table
// stored widened, bit for bit. Every other tensor is fp32.
TEST(TextEncoder, ABf16EmbeddingTableStaysBf16AndLooksUpExactly) {
  const std::string table = "model.language_model.embed_tokens.weight";
  test::TempDir narrow("te-bf16"), wide("te-wide");
  test::write_golden_encoder(narrow.str(), [&](const std::string& n, const at::Tensor& v) {
    return n == table ? std::optional<at::Tensor>(v.to(at::kBFloat16)) : std::nullopt;
  });
  test::write_golden_encoder(wide.str(), [&](const std::string& n, const at::Tensor& v) {
    return n == table ? std::optional<at::Tensor>(v.to(at::kBFloat16).to(at::kFloat)) : std::nullopt;
  });
  const auto a = TextEncoder::load(narrow.str(), kGoldenLayer),
             b = TextEncoder::load(wide.str(), kGoldenLayer);
  for (const auto& [name, t] : a.named())
    EXPECT_EQ(t.scalar_type(), name == table ? at::kBFloat16 : at::kFloat) << name;
  for (const char* name : kCases) {
    auto c = golden_case(name);
    const at::Tensor ha = a.forward(c.at("input_ids"), c.at("position_ids"));
    EXPECT_EQ(ha.scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(ha, b.forward(c.at("input_ids"), c.at("position_ids")))) << name;
  }
}

TEST(TextEncoder, LayersAtAndAboveKAreNeverRead) {
  // Layers 4 and 5, the final norm and the vision tower: absent from the checkpoint.
  test::TempDir dir("te-cut");
  test::write_golden_encoder(
      dir.str(), [](const std::string& n, const at::Tensor&) -> std::optional<at::Tensor> {
        const bool unused =
            n.rfind("model.visual.", 0) == 0 || n.rfind("model.language_model.layers.4.", 0) == 0 ||
            n.rfind("model.language_model.layers.5.", 0) == 0 || n == "model.language_model.norm.weight";
        return unused ? std::optional<at::Tensor>(at::Tensor()) : std::nullopt;
      });
  const auto enc = TextEncoder::load(dir.str(), kGoldenLayer);
  EXPECT_EQ(enc.named().size(), size_t(1 + 11 * kGoldenLayer));
  auto c = golden_case("h3_prompt");
  EXPECT_LE(test::max_abs_diff(enc.forward(c.at("input_ids"), c.at("position_ids")), c.at("hidden")), 1e-4);
  // A K the checkpoint does not reach is refused by name.
  test::expect_error([&] { TextEncoder::load(dir.str(), 5); }, ErrorKind::kNotFound,
                     {"model.language_model.layers.4.", "missing"});
}

TEST(TextEncoder, ConditioningLayerMustBeBelowTheLayerCount) {
  for (int64_t k : {0, 6, 50}) {
    test::expect_error([&] { TextEncoder::load(golden_encoder(), k); }, ErrorKind::kInvalidArgument,
                       {"K = " + std::to_string(k), "1..5", "6-layer", "--layer"});
  }
}

TEST(TextEncoder, MissingLayerOrWrongShapeNamesTheTensor) {
  {
    test::TempDir dir("te-missing");
    test::write_golden_encoder(dir.str(),
                               [](const std::string& n, const at::Tensor&) -> std::optional<at::Tensor> {
                                 if (n == "model.language_model.layers.2.mlp.up_proj.weight")
                                   return at::Tensor();
                                 return std::nullopt;
                               });
    test::expect_error([&] { TextEncoder::load(dir.str(), kGoldenLayer); }, ErrorKind::kNotFound,
                       {"model.language_model.layers.2.mlp.up_proj.weight", "missing", dir.str()});
  }
  {
    test::TempDir dir("te-shape");
    test::write_golden_encoder(dir.str(),
                               [](const std::string& n, const at::Tensor& t) -> std::optional<at::Tensor> {
                                 if (n == "model.language_model.layers.1.self_attn.k_proj.weight")
                                   return t.narrow(0, 0, 32).clone();
                                 return std::nullopt;
                               });
    test::expect_error([&] { TextEncoder::load(dir.str(), kGoldenLayer); }, ErrorKind::kMismatch,
                       {"model.language_model.layers.1.self_attn.k_proj.weight", "[32, 128]", "[64, 128]",
                        "model-00001-of-00002.safetensors"});
  }
  test::expect_error([] { TextEncoder::load("/nonexistent/text_encoder", kGoldenLayer); },
                     ErrorKind::kNotFound, {"/nonexistent/text_encoder/config.json"});
}

TEST(TextEncoder, EmptyAndOutOfVocabularyInputAreRefused) {
  const auto enc = TextEncoder::load(golden_encoder(), kGoldenLayer);
  test::expect_error([&] { enc.forward(std::vector<int64_t>{}); }, ErrorKind::kInvalidArgument, {"empty"});
  test::expect_error(
      [&] {
        enc.forward(std::vector<int64_t>{5, 151936});
      },
      ErrorKind::kInvalidArgument, {"151936", "vocabulary"});
}

TEST(TextEncoder, LongPromptEncodes) {
  // 20,000 characters of text: a few thousand rows, finite, all tagged text.
  const auto tok = Tokenizer::load(test::shipped_tokenizer_dir());
  const auto enc = TextEncoder::load(golden_encoder(), kGoldenLayer);
  std::string prompt;
  while (prompt.size() < 20000) prompt += "A wide aerial shot of a coastal city at dawn, soft golden light. ";
  prompt.resize(20000);
  const auto ids = tok.encode(prompt);
  const Conditioning c = enc.encode(ids);
  EXPECT_EQ(c.embeds.size(0), int64_t(ids.size()));
  EXPECT_EQ(c.embeds.size(1), 128);
  EXPECT_TRUE(at::isfinite(c.embeds).all().item<bool>());
  EXPECT_EQ(c.tags.sum().item<int64_t>(), int64_t(ids.size()));
}

TEST(TextEncoder, ReleaseDropsTheWeights) {
  auto enc = TextEncoder::load(golden_encoder(), kGoldenLayer);
  enc.release();
  EXPECT_TRUE(enc.named().empty());
  test::expect_error([&] { enc.forward(std::vector<int64_t>{1}); }, ErrorKind::kInvalidArgument,
                     {"released"});
}

// ---- tensor parallel ----

struct RankOut {
  at::Tensor hidden;
  std::vector<std::pair<std::string, at::Tensor>> named;
};

std::vector<RankOut> on_ranks(int n, const std::map<std::string, at::Tensor>& c) {
  std::vector<RankOut> out(static_cast<size_t>(n));
  const auto results = dist::run_threads(n, [&](dist::Group& g) {
    at::set_num_threads(1);
    const auto enc = TextEncoder::load(golden_encoder(), kGoldenLayer, &g);
    out[static_cast<size_t>(g.rank())] = {enc.forward(c.at("input_ids"), c.at("position_ids")), enc.named()};
  });
  for (const auto& r : results) EXPECT_TRUE(r.ok) << "rank " << r.rank << ": " << r.error;
  return out;
}

TEST(TextEncoderTp, Tp2EqualsTp1OnEveryRank) {
  const auto tp1 = TextEncoder::load(golden_encoder(), kGoldenLayer);
  for (const char* name : kCases) {
    auto c = golden_case(name);
    const auto one = tp1.forward(c.at("input_ids"), c.at("position_ids"));
    const auto two = on_ranks(2, c);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(two[r].hidden.defined()) << "rank " << r;
      const double d = test::max_abs_diff(two[r].hidden, one);
      std::printf("%s rank %d: max |TP2 - TP1| = %.3g\n", name, r, d);
      EXPECT_LE(d, 1e-5) << name << " rank " << r;
      EXPECT_LE(test::max_abs_diff(two[r].hidden, c.at("hidden")), 1e-4) << name << " rank " << r;
    }
  }
}

TEST(TextEncoderTp, ShardsOwnTheirStorage) {
  auto c = golden_case("single_char");
  const auto two = on_ranks(2, c);
  for (int r = 0; r < 2; ++r) {
    std::map<std::string, at::Tensor> by_name(two[r].named.begin(), two[r].named.end());
    EXPECT_EQ(by_name.size(), size_t(1 + 11 * kGoldenLayer)) << "rank " << r;
    for (const auto& [name, t] : two[r].named) {
      EXPECT_TRUE(t.is_contiguous()) << name;
      EXPECT_EQ(t.storage().nbytes(), size_t(t.numel()) * t.element_size()) << name << " rank " << r;
    }
    // Half of the heads (2 of 4 query, 1 of 2 key-value) and half of the SwiGLU width on each rank.
    const std::string p = "model.language_model.layers.0.";
    EXPECT_EQ(by_name.at(p + "self_attn.q_proj.weight").sizes(), at::IntArrayRef({64, 128}));
    EXPECT_EQ(by_name.at(p + "self_attn.k_proj.weight").sizes(), at::IntArrayRef({32, 128}));
    EXPECT_EQ(by_name.at(p + "self_attn.o_proj.weight").sizes(), at::IntArrayRef({128, 64}));
    EXPECT_EQ(by_name.at(p + "mlp.up_proj.weight").sizes(), at::IntArrayRef({128, 128}));
    EXPECT_EQ(by_name.at(p + "mlp.down_proj.weight").sizes(), at::IntArrayRef({128, 128}));
    EXPECT_EQ(by_name.at("model.language_model.embed_tokens.weight").sizes(), at::IntArrayRef({151936, 128}));
  }
  // Rank r holds rows r * 64 .. r * 64 + 63 of q_proj.
  const auto full = TextEncoder::load(golden_encoder(), kGoldenLayer).named();
  std::map<std::string, at::Tensor> whole(full.begin(), full.end());
  for (int r = 0; r < 2; ++r) {
    std::map<std::string, at::Tensor> part(two[r].named.begin(), two[r].named.end());
    const std::string q = "model.language_model.layers.3.self_attn.q_proj.weight";
    const std::string d = "model.language_model.layers.3.mlp.down_proj.weight";
    EXPECT_TRUE(at::equal(part.at(q), whole.at(q).narrow(0, r * 64, 64))) << r;
    EXPECT_TRUE(at::equal(part.at(d), whole.at(d).narrow(1, r * 128, 128))) << r;
  }
}

TEST(TextEncoderTp, RankCountThatCannotSplitIsRefusedOnEveryRank) {
  // 3 ranks: 4 query heads and 2 key-value heads do not divide.
  const auto results =
      dist::run_threads(3, [&](dist::Group& g) { TextEncoder::load(golden_encoder(), kGoldenLayer, &g); });
  ASSERT_EQ(results.size(), 3u);
  for (const auto& r : results) {
    EXPECT_FALSE(r.ok) << "rank " << r.rank;
    EXPECT_THAT(r.error, ::testing::HasSubstr("3 tensor-parallel ranks cannot split")) << "rank " << r.rank;
  }
}

}  // namespace
}  // namespace h3::text
