// `h3 inspect --shapes CONFIG.json [--index INDEX.json]`: the DiT parameter set the engine
// builds from a config (shapes only, no memory), and given a checkpoint index (diffusers or
// native layout) the tensor names missing on either side. For a text encoder's config, the
// tensors conditioning on hidden_states[K] reads (--layer K) and those an index lacks.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "dit/adaln_tables.h"
#include "dit/config.h"
#include "dit/consistency_sampler.h"
#include "dit/parameters.h"
#include "dit/sampler.h"
#include "dit/transformer.h"
#include "h3/error.h"
#include "h3/limits.h"
#include "io/layout.h"
#include "text/checkpoint_layout.h"
#include "text/encoder_config.h"
#include "text/encoder_parameters.h"
#include "tools/command.h"
#include "tools/inspect_model.h"

namespace h3::tools {
namespace {

std::vector<std::string> index_names(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorKind::kNotFound, path + ": cannot read the index");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kFormat, path + ": invalid JSON (" + std::string(e.what()) + ")");
  }
  if (!j.contains("weight_map") || !j["weight_map"].is_object()) {
    throw Error(ErrorKind::kFormat, path + ": no weight_map object (is this a *.safetensors.index.json?)");
  }
  std::vector<std::string> names;
  for (auto& [name, file] : j["weight_map"].items()) names.push_back(name);
  return names;
}

int64_t parse_steps(const std::string& text) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || v < 2 || v > kMaxSteps) {
    throw UsageError{"--adaln-tables " + text + ": give the grid points of the request's schedule (2.." +
                     std::to_string(kMaxSteps) + "; the release's default is 50)"};
  }
  return v;
}

// What one of `tp` ranks holds in the release's dtypes with the AdaLN projections and with the
// tables of an Euler grid of `steps` points (and of the causal sampler's 4 steps) instead.
void print_table_residency(const dit::DitConfig& c, const std::vector<dit::ParamSpec>& specs, int tp,
                           int64_t steps) {
  dit::check_tp(c, tp);
  int64_t with = 0, projections = 0;
  for (const auto& s : specs) {
    int64_t n = 1;
    for (auto d : s.local_shape(tp)) n *= d;
    const int64_t bytes = n * (s.fp32 ? 4 : 2);
    with += bytes;
    if (s.adaln) projections += bytes;
  }
  const auto grid = dit::evaluation_timesteps(dit::make_schedule(steps, dit::kVideoShift),
                                              dit::make_schedule(steps, dit::kAudioShift));
  const int64_t tables = dit::adaln_table_bytes(c, grid, tp, 2);
  const int64_t causal = dit::adaln_table_bytes(c, dit::causal_timesteps(dit::CausalSettings{}), tp, 2);
  const double gb = 1e9;
  std::printf("each of %d ranks, release dtypes: %.3f GB of weights, %.3f GB of them AdaLN projections\n", tp,
              with / gb, projections / gb);
  std::printf(
      "with AdaLN tables for %lld grid points (%zu evaluations): %.3f GB of weights + %.3f GB of tables = "
      "%.3f GB\n",
      static_cast<long long>(steps), grid.size(), (with - projections) / gb, tables / gb,
      (with - projections + tables) / gb);
  std::printf(
      "with the causal sampler's tables (4 steps and the clean forward): %.3f GB + %.3f GB = %.3f GB\n",
      (with - projections) / gb, causal / gb, (with - projections + causal) / gb);
}

bool is_text_encoder_config(const std::string& path) {
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("text_config");
}

// The Qwen3-VL text encoder: the tensors conditioning on hidden_states[K] reads (embed_tokens and
// layers 0..K-1), their parameters, and given an index, which of them it lacks.
int text_encoder_shapes(const std::string& config_path, int64_t layer,
                        const std::optional<std::string>& index) {
  const auto c = text::EncoderConfig::load(config_path);
  if (layer < 1 || layer >= c.num_layers) {
    throw UsageError{"--layer " + std::to_string(layer) + " must be within 1.." +
                     std::to_string(c.num_layers - 1) + " for this " + std::to_string(c.num_layers) +
                     "-layer encoder"};
  }
  const auto read = text::encoder_parameters(c, layer);
  const auto whole = text::encoder_parameters(c, c.num_layers);
  auto count = [](const std::vector<text::EncoderParameter>& ps) {
    int64_t n = 0;
    for (const auto& p : ps) n += p.numel();
    return n;
  };
  const int64_t n_read = count(read), n_whole = count(whole) + text::final_norm_parameter(c).numel();
  std::printf(
      "%s (Qwen3-VL text encoder): %lld layers, hidden %lld, %lld query / %lld key-value heads x %lld, "
      "SwiGLU %lld, vocabulary %lld\n",
      config_path.c_str(), (long long)c.num_layers, (long long)c.hidden_size, (long long)c.num_heads,
      (long long)c.num_kv_heads, (long long)c.head_dim, (long long)c.intermediate_size,
      (long long)c.vocab_size);
  std::printf(
      "hidden_states[%lld] reads embed_tokens + layers 0..%lld: tensors %zu, parameters %lld (%.2f B), "
      "%lld bytes in bf16\n",
      (long long)layer, (long long)(layer - 1), read.size(), (long long)n_read, n_read / 1e9,
      (long long)(2 * n_read));
  std::printf("the whole language model (without lm_head): tensors %zu, parameters %lld (%.2f B)\n",
              whole.size() + 1, (long long)n_whole, n_whole / 1e9);
  // The whole checkpoint, when the config describes its vision tower (the release's does; the
  // tiny model's minimal vision_config does not): what a download of the folder weighs.
  try {
    const auto all = text::checkpoint_parameters(config_path);
    const int64_t n_all = count(all);
    std::printf(
        "the whole checkpoint (language model, lm_head, vision tower): tensors %zu, parameters %lld, %lld "
        "bytes in bf16; conditioning reads %.1f %% of it\n",
        all.size(), (long long)n_all, (long long)(2 * n_all), 100.0 * n_read / n_all);
  } catch (const Error&) {
    std::printf("the whole checkpoint: not derived (the config's vision_config is incomplete)\n");
  }
  if (!index) return 0;
  const auto stored = index_names(*index);
  const std::set<std::string> have(stored.begin(), stored.end());
  int missing = 0;
  for (const auto& p : read) {
    if (!have.count(p.name)) {
      std::printf("missing from the index: %s\n", p.name.c_str());
      ++missing;
    }
  }
  std::printf("%s: %zu tensors, %zu of them read for hidden_states[%lld]: %d missing\n", index->c_str(),
              stored.size(), read.size() - missing, (long long)layer, missing);
  return missing ? 1 : 0;
}

int run(Args& args) {
  const auto shapes = args.opt_string("shapes");
  const auto index = args.opt_string("index");
  const int tp = static_cast<int>(args.int_or("tp", 1, 1, 1024));
  const auto layer = args.opt_string("layer");
  const auto table_steps = args.opt_string("adaln-tables");
  args.finish();
  if (shapes && is_text_encoder_config(*shapes)) {
    if (!args.positional().empty()) throw UsageError{"--shapes takes no other path"};
    int64_t k = text::kReleaseConditioningLayer;
    if (layer) {
      try {
        k = std::stoll(*layer);
      } catch (const std::exception&) {
        throw UsageError{"--layer must be an integer"};
      }
    }
    return text_encoder_shapes(*shapes, k, index);
  }
  if (layer) throw UsageError{"--layer goes with --shapes of a text encoder's config"};
  if (table_steps && !shapes) throw UsageError{"--adaln-tables goes with --shapes of a DiT config"};
  if (!shapes) {
    if (args.positional().size() != 1)
      throw UsageError{"give one model folder, component folder or checkpoint"};
    if (index) throw UsageError{"--index goes with --shapes"};
    return inspect_path(args.positional().front(), tp, stdout);
  }
  if (!args.positional().empty()) throw UsageError{"--shapes takes no other path"};
  const std::string config_path = *shapes;

  const auto c = dit::DitConfig::load(config_path);
  const auto specs = dit::dit_parameters(c);
  const auto n = dit::count_parameters(specs);
  std::printf("%s (%s schema): %lld blocks + %lld refiner blocks, hidden %lld, %lld heads x %lld, ffn %lld\n",
              config_path.c_str(), c.schema == dit::ConfigSchema::kNative ? "native" : "diffusers",
              static_cast<long long>(c.num_layers), static_cast<long long>(c.num_refiner_layers),
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.num_heads),
              static_cast<long long>(c.head_dim), static_cast<long long>(c.ffn_dim));
  std::printf(
      "tensors %zu, parameters %lld (%.2f B), AdaLN %lld (%.2f B), %lld bytes in the release dtypes\n",
      specs.size(), static_cast<long long>(n.total), n.total / 1e9, static_cast<long long>(n.adaln),
      n.adaln / 1e9, static_cast<long long>(n.release_bytes));
  if (table_steps) print_table_residency(c, specs, tp, parse_steps(*table_steps));
  if (!index) return 0;

  const auto stored = index_names(*index);
  const bool native = io::is_native_layout(io::ModelKind::kDit, stored);
  std::set<std::string> have;  // the index's tensors in canonical names
  for (const auto& s : stored) {
    if (!native) {
      have.insert(s);
      continue;
    }
    for (const auto& piece : io::native_to_canonical(io::ModelKind::kDit, s)) have.insert(piece.name);
  }
  std::set<std::string> built;
  for (const auto& s : specs) built.insert(s.name);
  int missing = 0, extra = 0;
  for (const auto& name : built) {
    if (!have.count(name)) {
      std::printf("missing from the index: %s\n", name.c_str());
      ++missing;
    }
  }
  for (const auto& name : have) {
    if (!built.count(name)) {
      std::printf("in the index but not in the model: %s\n", name.c_str());
      ++extra;
    }
  }
  std::printf("%s: %zu tensors (%s layout, %zu after conversion): %d missing, %d not in the model\n",
              index->c_str(), stored.size(), native ? "native" : "diffusers", have.size(), missing, extra);
  return missing || extra ? 1 : 0;
}

H3_REGISTER_COMMAND(
    "inspect", "a model folder or checkpoint: configs, tensors, dtypes, bytes, shard plan",
    "usage: h3 inspect DIR|FILE [--tp N]\n"
    "       h3 inspect --shapes CONFIG.json [--index INDEX.json] [--layer K]\n"
    "                  [--tp N --adaln-tables STEPS]\n"
    "\n"
    "  DIR|FILE              a model folder (model_index.json, transformer/, vae/, ...), a\n"
    "                        component folder, or a checkpoint (.safetensors or index):\n"
    "                        configs, tensor count, dtypes and bytes; for a DiT the\n"
    "                        tensor-parallel shard plan\n"
    "  --tp N                ranks of the shard plan (default 1)\n"
    "  --shapes CONFIG.json  a DiT config (transformer/config.json or the native\n"
    "                        FL2VA/transformer/config.json); prints the parameter count\n"
    "                        the engine builds from it (shapes only, no memory). Or a\n"
    "                        text encoder's (text_encoder/config.json): the tensors and\n"
    "                        parameters that conditioning on hidden_states[K] reads\n"
    "  --adaln-tables STEPS  with a DiT config: what each of --tp N ranks holds in the\n"
    "                        release dtypes with the AdaLN projections and with the AdaLN\n"
    "                        tables of a STEPS-point grid (and the causal sampler's) instead\n"
    "  --layer K             with a text encoder's config: K (default 50, the release's)\n"
    "  --index INDEX.json    a *.safetensors.index.json (diffusers or native names):\n"
    "                        prints the names missing on either side; exit code 1 if any\n"
    "                        (for a text encoder: the names it reads that the index lacks)",
    run);

}  // namespace
}  // namespace h3::tools
