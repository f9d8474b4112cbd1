#include "tools/inspect_model.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "dit/config.h"
#include "dit/parameters.h"
#include "engine/model/model.h"
#include "h3/error.h"
#include "io/checkpoint.h"
#include "io/shard_plan.h"
#include "io/weights.h"
#include "text/encoder_config.h"
#include "text/prompt_encoder.h"
#include "vae/config.h"

namespace h3::tools {
namespace {
namespace fs = std::filesystem;

std::string human(uint64_t bytes) {
  char b[64];
  if (bytes >= (1ull << 30)) {
    std::snprintf(b, sizeof b, "%.2f GiB", bytes / double(1ull << 30));
  } else if (bytes >= (1ull << 20)) {
    std::snprintf(b, sizeof b, "%.2f MiB", bytes / double(1ull << 20));
  } else {
    std::snprintf(b, sizeof b, "%.1f KiB", bytes / 1024.0);
  }
  return b;
}

// Safetensors' names for the dtypes (the file format's own vocabulary).
const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return "F64";
    case at::kFloat: return "F32";
    case at::kHalf: return "F16";
    case at::kBFloat16: return "BF16";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    case at::kShort: return "I16";
    case at::kChar: return "I8";
    case at::kByte: return "U8";
    case at::kBool: return "BOOL";
    default: return c10::toString(t);
  }
}

const char* split_name(io::Split s) {
  switch (s) {
    case io::Split::kReplicated: return "replicated";
    case io::Split::kColumn: return "column (dim 0)";
    case io::Split::kRow: return "row (dim 1)";
    case io::Split::kFusedColumn: return "fused column";
  }
  return "?";
}

// Tensor count, dtypes and bytes of a checkpoint (a file, an index, or a folder holding one).
void checkpoint_summary(const std::string& path, std::FILE* out) {
  const io::Checkpoint ck = io::Checkpoint::open(path);
  std::map<std::string, std::pair<int64_t, uint64_t>> by_dtype;
  uint64_t total = 0;
  const auto names = ck.names();
  for (const auto& n : names) {
    const io::TensorInfo& t = ck.info(n);
    auto& d = by_dtype[dtype_name(t.dtype)];
    d.first += 1;
    d.second += t.end - t.begin;
    total += t.end - t.begin;
  }
  std::fprintf(out, "  checkpoint %s: %zu tensors in %zu file(s), %llu bytes (%s)\n", ck.path().c_str(),
               names.size(), ck.files().size(), static_cast<unsigned long long>(total), human(total).c_str());
  for (const auto& [dtype, d] : by_dtype) {
    std::fprintf(out, "    %-8s %6lld tensors %14llu bytes\n", dtype.c_str(), static_cast<long long>(d.first),
                 static_cast<unsigned long long>(d.second));
  }
}

// The DiT's tensor-parallel plan over (split, bytes) pairs, one per declared tensor: bytes per
// split kind, and what each of `tp` ranks keeps.
void print_shard_plan(const std::vector<std::pair<io::Split, uint64_t>>& tensors, const dit::DitConfig& c,
                      int tp, const std::string& source, std::FILE* out) {
  std::map<io::Split, std::pair<int64_t, uint64_t>> by_split;
  for (const auto& [split, bytes] : tensors) {
    auto& d = by_split[split];
    d.first += 1;
    d.second += bytes;
  }
  std::fprintf(out, "  shard plan for tp %d (%s):\n", tp, source.c_str());
  uint64_t per_rank = 0;
  for (const auto& [split, d] : by_split) {
    std::fprintf(out, "    %-16s %6lld tensors %14llu bytes\n", split_name(split),
                 static_cast<long long>(d.first), static_cast<unsigned long long>(d.second));
    per_rank += split == io::Split::kReplicated ? d.second : d.second / static_cast<uint64_t>(tp);
  }
  try {
    io::check_dit_tp(tp, c.num_heads, c.ffn_dim, c.adaln_width());
    std::fprintf(out, "    each of %d ranks keeps %llu bytes (%s)\n", tp,
                 static_cast<unsigned long long>(per_rank), human(per_rank).c_str());
  } catch (const Error& e) {
    std::fprintf(out, "    tp %d cannot split this model: %s\n", tp, e.what());
  }
}

void shard_plan_of_checkpoint(const std::string& dir, const dit::DitConfig& c, int tp, std::FILE* out) {
  const auto w = io::Weights::open(dir, io::LayoutParams{io::ModelKind::kDit, c.num_heads, c.head_dim});
  // The tensors the loader takes, in the checkpoint's dtypes; anything else in it is never loaded.
  std::vector<std::pair<io::Split, uint64_t>> tensors;
  for (const auto& p : dit::dit_parameters(c)) {
    if (!w.contains(p.name)) continue;
    int64_t numel = 1;
    for (int64_t d : w.shape(p.name)) numel *= d;
    tensors.emplace_back(p.split, static_cast<uint64_t>(numel) * c10::elementSize(w.dtype(p.name)));
  }
  print_shard_plan(tensors, c, tp, w.is_native() ? "native layout, converted" : "diffusers layout", out);
}

// Without the weights: the parameter set the config implies, in the release's dtypes.
void shard_plan_of_config(const dit::DitConfig& c, int tp, std::FILE* out) {
  std::vector<std::pair<io::Split, uint64_t>> tensors;
  for (const auto& p : dit::dit_parameters(c)) {
    tensors.emplace_back(p.split, static_cast<uint64_t>(p.numel()) * (p.fp32 ? 4u : 2u));
  }
  print_shard_plan(tensors, c, tp, "from the config, release dtypes", out);
}

// A folder whose index lists shards that are not there (e.g. the release's configs and indexes
// without the weights): what the index says.
bool index_only_summary(const std::string& dir, std::FILE* out) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const std::string suffix = ".safetensors.index.json";
    if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const io::CheckpointIndex idx = io::read_checkpoint_index(e.path().string());
    const auto shards = idx.shard_files();
    size_t present = 0;
    for (const auto& f : shards) present += fs::is_regular_file(fs::path(dir) / f) ? 1 : 0;
    std::fprintf(out, "  index %s: %zu tensors in %zu shard file(s), %zu of them present",
                 e.path().string().c_str(), idx.weight_map.size(), shards.size(), present);
    if (idx.total_size) {
      std::fprintf(out, "; total_size %llu bytes (%s)", static_cast<unsigned long long>(*idx.total_size),
                   human(*idx.total_size).c_str());
    }
    std::fprintf(out, "\n");
    return true;
  }
  return false;
}

// The checkpoint's figures, or the index's when its shard files are absent.
bool summary_or_index(const std::string& dir, std::FILE* out) {
  try {
    checkpoint_summary(dir, out);
    return true;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kNotFound || !fs::is_directory(dir) || !index_only_summary(dir, out)) throw;
    return false;
  }
}

void inspect_transformer(const std::string& dir, int tp, std::FILE* out) {
  const auto c = dit::DitConfig::load(dir);
  std::fprintf(out,
               "transformer %s: %lld blocks + %lld refiner blocks, hidden %lld, %lld heads x %lld, ffn %lld, "
               "text_dim %lld\n",
               dir.c_str(), (long long)c.num_layers, (long long)c.num_refiner_layers,
               (long long)c.hidden_size, (long long)c.num_heads, (long long)c.head_dim, (long long)c.ffn_dim,
               (long long)c.text_dim);
  if (summary_or_index(dir, out)) {
    shard_plan_of_checkpoint(dir, c, tp, out);
  } else {
    shard_plan_of_config(c, tp, out);
  }
}

void inspect_vae(const std::string& dir, std::FILE* out) {
  const vae::VaeSource s = vae::find_vae(dir);
  const vae::VaeConfig& c = s.config;
  std::fprintf(out, "vae %s (%s layout): decoder %lld layers, %lld heads x %lld, %lld latent channels\n",
               dir.c_str(), s.native ? "native" : "diffusers", (long long)c.num_layers,
               (long long)c.num_heads, (long long)c.head_dim, (long long)c.latent_channels);
  if (s.native) {
    checkpoint_summary(s.weights_path, out);
  } else {
    summary_or_index(s.weights_path, out);
  }
}

// A Qwen3-VL config.json: the release's text_encoder/ (a "text_config" inside).
bool is_qwen_config(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "config.json");
  const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("text_config");
}

void inspect_text_encoder(const std::string& dir, std::FILE* out) {
  const auto c = text::EncoderConfig::load(dir);
  std::fprintf(
      out,
      "text_encoder %s (Qwen3-VL): %lld layers, hidden %lld, %lld query / %lld key-value heads x %lld, "
      "SwiGLU %lld, vocabulary %lld\n",
      dir.c_str(), (long long)c.num_layers, (long long)c.hidden_size, (long long)c.num_heads,
      (long long)c.num_kv_heads, (long long)c.head_dim, (long long)c.intermediate_size,
      (long long)c.vocab_size);
  summary_or_index(dir, out);
}

}  // namespace

int inspect_path(const std::string& path, int tp, std::FILE* out) {
  const fs::path p(path);
  if (!fs::exists(p)) throw Error(ErrorKind::kNotFound, path + ": no such file or folder");
  if (fs::is_directory(p) && fs::is_regular_file(p / "model_index.json")) {
    const ModelInfo m = read_model(path);
    std::fprintf(out, "model %s\n", path.c_str());
    std::fprintf(out, "  defaults: %lldx%lld, %lld frames, %lld grid points; shifts video %g, audio %g\n",
                 (long long)m.defaults.width, (long long)m.defaults.height, (long long)m.defaults.num_frames,
                 (long long)m.defaults.steps, m.video_shift, m.audio_shift);
    std::fprintf(out, "  text encoder: %s\n",
                 m.prompt_encoder ? "Qwen3-VL with tokenizer/ (a prompt string conditions it)"
                                  : "none (generate needs precomputed embeddings: --embeds FILE)");
    inspect_transformer(m.transformer_dir, tp, out);
    inspect_vae(m.vae_dir, out);
    if (m.prompt_encoder) inspect_text_encoder(m.text_encoder_dir, out);
    return 0;
  }
  if (fs::is_directory(p) && fs::is_regular_file(p / "config.json")) {
    // A component folder: the DiT's config names heads; anything else is read as a VAE.
    if (is_qwen_config(path)) {
      inspect_text_encoder(path, out);
      return 0;
    }
    text::refuse_byte_encoder(path);
    bool is_dit = true;
    try {
      dit::DitConfig::load(path);
    } catch (const Error&) {
      is_dit = false;
    }
    if (is_dit) {
      inspect_transformer(path, tp, out);
    } else {
      inspect_vae(path, out);
    }
    return 0;
  }
  std::fprintf(out, "%s\n", path.c_str());
  checkpoint_summary(path, out);
  return 0;
}

}  // namespace h3::tools
