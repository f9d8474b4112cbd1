// The LoRA loader (dit/lora.h) on files written here with the project's safetensors writer, bound
// onto the tiny golden DiT's adapter slots (shapes only: no weights are read): each module's
// effective delta W = scale * B A against an fp64 computation under PEFT's rules (alpha / r,
// rslora's alpha / sqrt(r), alpha_pattern and rank_pattern as regular expressions in the
// config's order, the alpha a file's metadata gives), kohya's lora_down / lora_up names with
// their alpha tensors, and the exact refusal of damaged and inconsistent files.
#include "dit/lora.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../../temp_dir.h"
#include "dit_test_util.h"
#include "h3/error.h"
#include "io/safetensors.h"

namespace h3::dit {
namespace {

namespace fs = std::filesystem;
using Tensors = std::vector<std::pair<std::string, at::Tensor>>;

const DitConfig& tiny() {
  static const DitConfig c = DitConfig::load(testing::golden_dir() + "/transformer_tiny/config.json");
  return c;
}

// The tiny DiT's weights without tensors: every adapter slot, nothing loaded.
DitWeights slots_of(const DitConfig& c) {
  DitWeights w;
  w.blocks.resize(static_cast<size_t>(c.num_layers));
  w.refiner.resize(static_cast<size_t>(c.num_refiner_layers));
  return w;
}

class LoraFiles : public ::testing::Test {
 protected:
  // A folder `name` holding adapter_model.safetensors (and adapter_config.json when given).
  std::string folder(const std::string& name, const Tensors& tensors, const std::string& config = "",
                     const std::map<std::string, std::string>& metadata = {}) {
    const fs::path d = dir_ / name;
    fs::create_directories(d);
    io::write_safetensors((d / "adapter_model.safetensors").string(), tensors, metadata);
    if (!config.empty()) std::ofstream(d / "adapter_config.json") << config;
    return d.string();
  }
  static std::string file_in(const std::string& folder) { return folder + "/adapter_model.safetensors"; }

  // attach_lora's h3::Error for `path` (empty when it was accepted), with the slots checked
  // untouched.
  std::string refusal(const std::string& path, ErrorKind kind, const DitConfig& c = tiny()) {
    DitWeights w = slots_of(c);
    try {
      attach_lora(w, c, path);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      bool any = false;
      declare_adapters(static_cast<const DitWeights&>(w),
                       [&](const std::string&, const Adapter& a) { any = any || a.defined(); });
      EXPECT_FALSE(any) << "an adapter was attached by a refused file";
      return e.what();
    }
    ADD_FAILURE() << path << " was accepted";
    return {};
  }

  const test::TempDir tmp_{"lora-test"};
  const fs::path dir_ = tmp_.str();
};

at::Tensor random(std::vector<int64_t> shape, uint64_t seed) {
  auto g = at::detail::createCPUGenerator(seed);
  return at::randn(shape, g);
}

// delta W as the adapter applies it (its residual of every unit input: [in, out], transposed)
// against scale * B A in fp64; the largest difference relative to the largest entry.
double delta_error(const Adapter& a, const at::Tensor& b, const at::Tensor& down, double scale) {
  const int64_t in = a.down.size(1);
  const at::Tensor applied = a.residual(at::eye(in, at::kFloat)).t().to(at::kDouble);
  const at::Tensor want = b.to(at::kDouble).matmul(down.to(at::kDouble)).mul(scale);
  EXPECT_EQ(applied.sizes(), want.sizes());
  return (applied - want).abs().max().item<double>() / want.abs().max().item<double>();
}

constexpr double kDeltaTolerance = 1e-6;  // fp32 B(A x) against fp64 B A, relative

// ---- scaling ----

TEST_F(LoraFiles, PlainLoraScalesByAlphaOverR) {
  // context_embedder (condition_proj natively): [128, 64]; r = 4, alpha 8: scale 2.
  const at::Tensor a = random({4, 64}, 1), b = random({128, 4}, 2);
  const std::string d = folder("plain",
                               {{"base_model.model.dit.condition_proj.lora_A.weight", a},
                                {"base_model.model.dit.condition_proj.lora_B.weight", b}},
                               R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "use_rslora": false})");
  DitWeights w = slots_of(tiny());
  const LoraSummary s = attach_lora(w, tiny(), d);
  EXPECT_EQ(s.alpha_source, "adapter_config.json");
  EXPECT_DOUBLE_EQ(w.context_embedder.lora.scale, 2.0);
  const double err = delta_error(w.context_embedder.lora, b, a, 8.0 / 4.0);
  std::printf("plain: scale %.17g, delta W relative error %.3g\n", w.context_embedder.lora.scale, err);
  EXPECT_LE(err, kDeltaTolerance);
}

TEST_F(LoraFiles, RsLoraScalesByAlphaOverSqrtR) {
  // r = 9, alpha 6: rslora 6 / 3 = 2 (plain LoRA would give 6 / 9).
  const at::Tensor a = random({9, 64}, 3), b = random({128, 9}, 4);
  const std::string d = folder(
      "rslora",
      {{"transformer.context_embedder.lora_A.weight", a}, {"transformer.context_embedder.lora_B.weight", b}},
      R"({"r": 9, "lora_alpha": 6, "use_rslora": true})");
  DitWeights w = slots_of(tiny());
  attach_lora(w, tiny(), d);
  EXPECT_DOUBLE_EQ(w.context_embedder.lora.scale, 2.0);
  const double err = delta_error(w.context_embedder.lora, b, a, 6.0 / std::sqrt(9.0));
  std::printf("rslora: scale %.17g, delta W relative error %.3g\n", w.context_embedder.lora.scale, err);
  EXPECT_LE(err, kDeltaTolerance);
}

// PEFT's alpha_pattern and rank_pattern: each key a regular expression that must match the whole
// module name after some dotted prefix, the first in the config's own order winning.
TEST_F(LoraFiles, AlphaAndRankPatternsMatchAsPeftMatchesThem) {
  const Tensors t = {
      {"base_model.model.dit.blocks.0.attn.out_proj.lora_A.weight", random({4, 256}, 5)},
      {"base_model.model.dit.blocks.0.attn.out_proj.lora_B.weight", random({128, 4}, 6)},
      {"base_model.model.dit.blocks.1.attn.out_proj.lora_A.weight", random({8, 256}, 7)},
      {"base_model.model.dit.blocks.1.attn.out_proj.lora_B.weight", random({128, 8}, 8)},
      {"base_model.model.dit.blocks.0.adaln_proj.linear.lora_A.weight", random({4, 64}, 9)},
      {"base_model.model.dit.blocks.0.adaln_proj.linear.lora_B.weight", random({2304, 4}, 10)},
      {"base_model.model.dit.condition_proj.lora_A.weight", random({4, 64}, 11)},
      {"base_model.model.dit.condition_proj.lora_B.weight", random({128, 4}, 12)},
  };
  // "attn" matches no whole tail of a name; block 0's own entry comes before the one of every
  // block; "adaln_proj.linear" is a regular expression too (its dot any character).
  const std::string config = R"({"r": 4, "lora_alpha": 8,
      "rank_pattern": {"blocks\\.1\\..*": 8},
      "alpha_pattern": {"attn": 100, "blocks\\.0\\.attn\\.out_proj": 2, "blocks\\.[0-9]+\\.attn\\.out_proj": 32,
                        "adaln_proj.linear": 16}})";
  DitWeights w = slots_of(tiny());
  const LoraSummary s = attach_lora(w, tiny(), folder("patterns", t, config));
  EXPECT_EQ(s.rank, 8);
  EXPECT_EQ(s.alpha_source, "adapter_config.json alpha_pattern 'adaln_proj.linear'");  // the first module's
  EXPECT_DOUBLE_EQ(w.blocks[0].to_out_lora.scale, 2.0 / 4);
  EXPECT_DOUBLE_EQ(w.blocks[1].to_out_lora.scale, 32.0 / 8);  // rank 8 from rank_pattern
  EXPECT_DOUBLE_EQ(w.blocks[0].adaln.lora.scale, 16.0 / 4);
  EXPECT_DOUBLE_EQ(w.context_embedder.lora.scale, 8.0 / 4);
  EXPECT_LE(delta_error(w.blocks[1].to_out_lora, t[3].second, t[2].second, 4.0), kDeltaTolerance);
  // The config's order, not the keys' sorted order: every block's entry first now wins for block 0.
  const std::string reordered = R"({"r": 4, "lora_alpha": 8, "rank_pattern": {"blocks\\.1\\..*": 8},
      "alpha_pattern": {"blocks\\.[0-9]+\\.attn\\.out_proj": 32, "blocks\\.0\\.attn\\.out_proj": 2}})";
  DitWeights v = slots_of(tiny());
  attach_lora(v, tiny(), folder("reordered", t, reordered));
  EXPECT_DOUBLE_EQ(v.blocks[0].to_out_lora.scale, 32.0 / 4);
  // A rank the config does not give the module's tensors: PEFT could not load them either.
  const std::string wrong = R"({"r": 4, "lora_alpha": 8})";
  EXPECT_EQ(refusal(folder("wrong-rank", t, wrong), ErrorKind::kFormat),
            file_in((dir_ / "wrong-rank").string()) +
                ": LoRA module 'blocks.1.attn.out_proj' has rank 8 (lora_A [8, 256]) but " +
                (dir_ / "wrong-rank" / "adapter_config.json").string() +
                " gives it rank 4 (r): the settings are not this file's; give the adapter_config.json it was "
                "saved with");
  // A key that is no regular expression.
  EXPECT_EQ(refusal(folder("bad-pattern", t, R"({"alpha_pattern": {"blocks.(0": 2}})"), ErrorKind::kFormat)
                .rfind((dir_ / "bad-pattern" / "adapter_config.json").string() +
                           ": alpha_pattern key 'blocks.(0' is not a regular expression (",
                       0),
            0u);
}

// The alpha a file's own metadata gives: diffusers' lora_adapter_metadata (its LoraConfig, keys
// prefixed "transformer."), then a plain lora_alpha value; both before adapter_config.json.
TEST_F(LoraFiles, TheFilesOwnMetadataGivesAlphaBeforeTheFolderConfig) {
  const at::Tensor a = random({4, 64}, 13), b = random({128, 4}, 14);
  const Tensors t = {{"transformer.context_embedder.lora_A.weight", a},
                     {"transformer.context_embedder.lora_B.weight", b}};
  const std::string folder_config = R"({"r": 4, "lora_alpha": 64})";
  DitWeights w = slots_of(tiny());
  LoraSummary s = attach_lora(w, tiny(), folder("plain-meta", t, folder_config, {{"lora_alpha", "16"}}));
  EXPECT_EQ(s.alpha_source, "metadata");
  EXPECT_DOUBLE_EQ(w.context_embedder.lora.scale, 16.0 / 4);
  // diffusers' metadata, as save_lora_weights writes it (sorted keys), with rslora.
  const std::string diffusers =
      R"({"transformer.lora_alpha": 12, "transformer.r": 4, "transformer.use_rslora": true,
      "transformer.alpha_pattern": {}, "transformer.rank_pattern": {}, "text_encoder.lora_alpha": 1})";
  s = attach_lora(w, tiny(),
                  folder("diffusers-meta", t, folder_config,
                         {{"format", "pt"}, {"lora_adapter_metadata", diffusers}, {"lora_alpha", "16"}}));
  EXPECT_EQ(s.alpha_source, "lora_adapter_metadata");
  EXPECT_DOUBLE_EQ(w.context_embedder.lora.scale, 12.0 / 2);
  EXPECT_LE(delta_error(w.context_embedder.lora, b, a, 6.0), kDeltaTolerance);
  // Metadata that is not a number, or not JSON.
  EXPECT_EQ(refusal(folder("nan-meta", t, "", {{"lora_alpha", "eight"}}), ErrorKind::kFormat),
            file_in((dir_ / "nan-meta").string()) +
                " metadata 'lora_alpha': alpha 'eight' is not a positive number");
  EXPECT_EQ(refusal(folder("json-meta", t, "", {{"lora_adapter_metadata", "{\"transformer.r\": "}}),
                    ErrorKind::kFormat),
            file_in((dir_ / "json-meta").string()) +
                " metadata 'lora_adapter_metadata': is not a JSON object: a LoRA's settings are PEFT's "
                "LoraConfig as "
                "JSON");
  EXPECT_EQ(
      refusal(folder("dora-meta", t, "", {{"lora_adapter_metadata", R"({"transformer.use_dora": true})"}}),
              ErrorKind::kFormat),
      file_in((dir_ / "dora-meta").string()) +
          " metadata 'lora_adapter_metadata': use_dora is true: DoRA adapters are not supported, only plain "
          "LoRA");
}

// ---- names ----

// kohya's lora_down / lora_up with a per-module alpha tensor, on the native fused qkv: the same
// adapters as lora_A / lora_B with that alpha in the config.
TEST_F(LoraFiles, KohyaDownUpNamesWithAlphaTensorsAdaptLikePeftNames) {
  const at::Tensor a = random({4, 128}, 15), b = random({768, 4}, 16);
  DitWeights kohya = slots_of(tiny());
  const LoraSummary s =
      attach_lora(kohya, tiny(),
                  folder("kohya", {{"diffusion_model.blocks.0.attn.qkv_proj.lora_down.weight", a},
                                   {"diffusion_model.blocks.0.attn.qkv_proj.lora_up.weight", b},
                                   {"diffusion_model.blocks.0.attn.qkv_proj.alpha", at::tensor(2.0f)}}));
  EXPECT_EQ(s.alpha_source, "tensor");
  EXPECT_EQ(s.adapted_layers, 3);
  const Adapter* qkv[] = {&kohya.blocks[0].to_q_lora, &kohya.blocks[0].to_k_lora, &kohya.blocks[0].to_v_lora};
  for (int p = 0; p < 3; ++p) {
    EXPECT_DOUBLE_EQ(qkv[p]->scale, 0.5);
    EXPECT_LE(delta_error(*qkv[p], b.narrow(0, p * 256, 256), a, 0.5), kDeltaTolerance) << p;  // [Q; K; V]
  }
  DitWeights peft = slots_of(tiny());
  attach_lora(peft, tiny(),
              folder("peft",
                     {{"base_model.model.dit.blocks.0.attn.qkv_proj.lora_A.weight", a},
                      {"base_model.model.dit.blocks.0.attn.qkv_proj.lora_B.weight", b}},
                     R"({"r": 4, "lora_alpha": 2})"));
  EXPECT_TRUE(at::equal(peft.blocks[0].to_k_lora.up, kohya.blocks[0].to_k_lora.up));
  EXPECT_TRUE(at::equal(peft.blocks[0].to_k_lora.down, kohya.blocks[0].to_k_lora.down));
  EXPECT_DOUBLE_EQ(peft.blocks[0].to_k_lora.scale, kohya.blocks[0].to_k_lora.scale);
  // kohya's flattened names are said to be unread, not mistaken for another model.
  const std::string flat = folder("flat", {{"lora_unet_blocks_0_attn_qkv_proj.lora_down.weight", a},
                                           {"lora_unet_blocks_0_attn_qkv_proj.lora_up.weight", b}});
  EXPECT_EQ(
      refusal(flat, ErrorKind::kFormat),
      file_in(flat) +
          ": LoRA module 'lora_unet_blocks_0_attn_qkv_proj' is named as kohya's scripts flatten names (dots "
          "turned into underscores), which are not read: give the module names with their dots (e.g. "
          "diffusion_model.blocks.0.attn.qkv_proj.lora_down.weight)");
  // An alpha tensor of more than one number.
  const std::string vec =
      folder("vector-alpha", {{"diffusion_model.condition_proj.lora_down.weight", random({4, 64}, 1)},
                              {"diffusion_model.condition_proj.lora_up.weight", random({128, 4}, 2)},
                              {"diffusion_model.condition_proj.alpha", at::ones({4})}});
  EXPECT_EQ(
      refusal(vec, ErrorKind::kFormat),
      file_in(vec) +
          ": tensor 'diffusion_model.condition_proj.alpha' has shape [4]: a module's alpha is one number");
}

// ---- refusals ----

TEST_F(LoraFiles, RanksOfAAndBThatDifferAreRefusedNamingBothShapes) {
  const std::string d =
      folder("ranks", {{"base_model.model.dit.condition_proj.lora_A.weight", random({4, 64}, 1)},
                       {"base_model.model.dit.condition_proj.lora_B.weight", random({128, 3}, 2)}});
  EXPECT_EQ(refusal(d, ErrorKind::kFormat),
            file_in(d) +
                ": LoRA module 'condition_proj' has lora_A [4, 64] and lora_B [128, 3]: their ranks differ");
  const std::string zero =
      folder("rank0", {{"base_model.model.dit.condition_proj.lora_A.weight", at::zeros({0, 64})},
                       {"base_model.model.dit.condition_proj.lora_B.weight", at::zeros({128, 0})}});
  EXPECT_EQ(refusal(zero, ErrorKind::kFormat),
            file_in(zero) + ": LoRA module 'condition_proj' has rank 0 (lora_A [0, 64]): it adapts nothing");
}

TEST_F(LoraFiles, ALayerAdaptedTwiceIsRefusedNamingBothModules) {
  // The native and the diffusers name of one layer.
  const std::string d = folder(
      "twice", {{"base_model.model.dit.blocks.0.attn.out_proj.lora_A.weight", random({4, 256}, 1)},
                {"base_model.model.dit.blocks.0.attn.out_proj.lora_B.weight", random({128, 4}, 2)},
                {"transformer.transformer_blocks.0.attn.to_out.0.lora_A.weight", random({4, 256}, 3)},
                {"transformer.transformer_blocks.0.attn.to_out.0.lora_B.weight", random({128, 4}, 4)}});
  EXPECT_EQ(refusal(d, ErrorKind::kFormat),
            file_in(d) +
                ": LoRA modules 'blocks.0.attn.out_proj' and 'transformer_blocks.0.attn.to_out.0' both adapt "
                "'transformer_blocks.0.attn.to_out.0.weight' (two names for one layer): keep one of them");
  // One module's A under two names (PEFT's and kohya's).
  const std::string a2 = folder("a-twice", {{"dit.condition_proj.lora_A.weight", random({4, 64}, 1)},
                                            {"dit.condition_proj.lora_down.weight", random({4, 64}, 2)},
                                            {"dit.condition_proj.lora_B.weight", random({128, 4}, 3)}});
  EXPECT_EQ(
      refusal(a2, ErrorKind::kFormat),
      file_in(a2) +
          ": tensors 'dit.condition_proj.lora_A.weight' and 'dit.condition_proj.lora_down.weight' are both "
          "module 'condition_proj''s lora_A (lora_down): give each module's tensors once");
}

TEST_F(LoraFiles, AFileThatAdaptsNothingIsRefused) {
  const std::string empty = folder("empty", {}, "", {{"format", "pt"}});
  EXPECT_EQ(refusal(empty, ErrorKind::kFormat),
            file_in(empty) + ": holds no LoRA tensors (0 tensors): it adapts nothing");
  const std::string alpha_only =
      folder("alpha-only", {{"diffusion_model.condition_proj.alpha", at::tensor(4.0f)}});
  EXPECT_EQ(
      refusal(alpha_only, ErrorKind::kFormat),
      file_in(alpha_only) +
          ": LoRA module 'condition_proj' has only its alpha, neither lora_A nor lora_B: the LoRA file is "
          "incomplete");
  // Weights holding fewer refiner blocks than the config names: those layers have no slot.
  DitConfig c = tiny();
  const std::string refiner =
      folder("refiner",
             {{"base_model.model.dit.token_refiner.blocks.1.mlp.fc2.lora_A.weight", random({4, 256}, 1)},
              {"base_model.model.dit.token_refiner.blocks.1.mlp.fc2.lora_B.weight", random({128, 4}, 2)}});
  DitWeights w = slots_of(c);
  w.refiner.resize(1);
  try {
    attach_lora(w, c, refiner);
    ADD_FAILURE() << "a layer without a slot was adapted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kMismatch);
    EXPECT_EQ(
        std::string(e.what()),
        file_in(refiner) +
            ": LoRA module 'token_refiner.blocks.1.mlp.fc2' adapts "
            "'token_refiner.refiner_blocks.1.ff.net.2.weight', a layer these weights apply no LoRA to (they "
            "hold 2 blocks and 1 refiner blocks; see docs/causal.md \"LoRA\")");
  }
}

// A damaged file: empty, its header cut, its data cut. Each names the file (and the tensor whose
// bytes are missing).
TEST_F(LoraFiles, EmptyAndTruncatedFilesAreRefusedNamingFileAndTensor) {
  const std::string good =
      folder("good", {{"base_model.model.dit.condition_proj.lora_A.weight", random({4, 64}, 1)},
                      {"base_model.model.dit.condition_proj.lora_B.weight", random({128, 4}, 2)}});
  std::ifstream in(file_in(good), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  ASSERT_EQ(bytes.size(), 8 + 224 + (4 * 64 + 128 * 4) * 4u);  // the header padded to 8 bytes
  auto cut = [&](const std::string& name, size_t n) {
    const fs::path p = dir_ / (name + ".safetensors");
    std::ofstream(p, std::ios::binary) << bytes.substr(0, n);
    return p.string();
  };
  const std::string zero = cut("zero", 0);
  EXPECT_EQ(refusal(zero, ErrorKind::kFormat),
            zero + ": empty file (0 bytes); the file is not a valid safetensors file");
  const std::string header = cut("header", 100);
  EXPECT_EQ(refusal(header, ErrorKind::kFormat),
            header +
                ": header length 224 runs past the end of the file (100 bytes); the file is not a valid "
                "safetensors file");
  const std::string data = cut("data", bytes.size() - 4);
  EXPECT_EQ(
      refusal(data, ErrorKind::kFormat),
      data +
          ": tensor 'base_model.model.dit.condition_proj.lora_B.weight': \"data_offsets\" [1024,3072] are "
          "out of range: the data area holds 3068 bytes; the file is not a valid safetensors file");
  // The whole file is accepted: the cuts are what the refusals are about.
  DitWeights w = slots_of(tiny());
  EXPECT_EQ(attach_lora(w, tiny(), good).adapted_layers, 1);
  EXPECT_EQ(refusal((dir_ / "absent").string(), ErrorKind::kNotFound),
            "LoRA file " + (dir_ / "absent").string() +
                " does not exist: give a PEFT adapter_model.safetensors or its folder");
}

}  // namespace
}  // namespace h3::dit
